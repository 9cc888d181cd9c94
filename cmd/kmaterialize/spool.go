package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// spoolMemory is how much of a routed command's output is held in memory
// before the rest goes to a temporary file.
const spoolMemory = 8 << 20

// spool holds a routed command's output until it is complete, so that a
// failure partway (a row that cannot be shown, a publish mid-scan, a
// response cut short) leaves nothing on stdout, as on the direct path,
// whose output comes from one read transaction. The first spoolMemory bytes
// stay in memory, the rest go to an unlinked temporary file. Close releases
// it; it is not safe for concurrent use.
type spool struct {
	mem  bytes.Buffer
	file *os.File
}

func (s *spool) Write(b []byte) (int, error) {
	if s.file == nil && s.mem.Len()+len(b) <= spoolMemory {
		return s.mem.Write(b)
	}
	if s.file == nil {
		f, err := os.CreateTemp("", "kmaterialize-output-*")
		if err != nil {
			return 0, fmt.Errorf("spool the daemon's answer: %w", err)
		}
		// Unlinked at once: the file goes away with the process, whatever
		// happens to it.
		os.Remove(f.Name())
		s.file = f
	}
	n, err := s.file.Write(b)
	if err != nil {
		return n, fmt.Errorf("spool the daemon's answer: %w", err)
	}
	return n, nil
}

// WriteTo copies everything written to w.
func (s *spool) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(s.mem.Bytes())
	if err != nil || s.file == nil {
		return int64(n), err
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return int64(n), fmt.Errorf("spool the daemon's answer: %w", err)
	}
	m, err := io.Copy(w, s.file)
	return int64(n) + m, err
}

// Close releases the temporary file, if any.
func (s *spool) Close() error {
	s.mem.Reset()
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	return err
}
