package store

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzSpoolFrames: the spool frame reader, given any bytes and any count,
// never panics and never allocates more than the bytes it is given; it
// either decodes exactly count frames that re-encode (appendFrame) to the
// whole input, or fails with ErrBadSpool after frames that re-encode to a
// prefix of it. Files written by appendFrame decode to what was written.
func FuzzSpoolFrames(f *testing.F) {
	var seed []byte
	seed = appendFrame(seed, []byte("k1"), []byte("v1"), false)
	seed = appendFrame(seed, []byte("k2"), nil, true)
	seed = appendFrame(seed, []byte("k3"), []byte{}, false)
	seed = appendFrame(seed, bytes.Repeat([]byte("k"), 300), bytes.Repeat([]byte("v"), 70000), false)
	f.Add(seed, uint16(4))
	f.Add(seed, uint16(3))
	f.Add(seed, uint16(5))
	f.Add(seed[:len(seed)-1], uint16(4))
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{'p', 0x80, 0x00}, uint16(1))
	f.Add([]byte{'d', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, uint16(1))
	f.Add([]byte{'x', 1, 'k'}, uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, count uint16) {
		fr := newFrameReader(bufio.NewReaderSize(bytes.NewReader(data), 16), int64(len(data)), int64(count))
		var again []byte
		for i := 0; ; i++ {
			ch, err := fr.next()
			if err == io.EOF {
				if i != int(count) || !bytes.Equal(again, data) {
					t.Fatalf("EOF after %d of %d frames; they re-encode to %x, the input is %x", i, count, again, data)
				}
				return
			}
			if err != nil {
				if !errors.Is(err, ErrBadSpool) {
					t.Fatalf("error %v, want ErrBadSpool", err)
				}
				return
			}
			if i >= int(count) {
				t.Fatalf("frame %d of %d", i, count)
			}
			if len(ch.Key) == 0 || ch.Deleted && ch.Value != nil || !ch.Deleted && ch.Value == nil {
				t.Fatalf("frame %d: %+v", i, ch)
			}
			again = appendFrame(again, ch.Key, ch.Value, ch.Deleted)
			if !bytes.HasPrefix(data, again) {
				t.Fatalf("frame %d re-encodes to %x, not a prefix of %x", i, again, data)
			}
		}
	})
}
