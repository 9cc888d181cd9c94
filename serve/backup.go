package serve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/store"
)

// GET /v1/backup: a consistent copy of the whole database file, taken in
// one read transaction (store.DB.Backup) into a spool file beside the
// database at disk speed, then sent from the file at the client's pace: a
// slow client never holds the read transaction, which makes every commit
// that must grow the file wait (store/pager.go). One backup runs at a
// time, and not beside a compaction (409 backup_running or
// compact_running: maintain.go); one that would not fit on the
// database's file system is 507 no_space before it starts. The spool file
// is unlinked as soon as it is created: it takes space only while the
// backup is written and sent, and a killed daemon leaves nothing behind.
// Admin-only on TCP: the copy holds every table.

// backupSpaceMargin is what a backup leaves free on the file system beyond
// its own size.
const backupSpaceMargin = 64 << 20

func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	if !checkParams(w, r) {
		return
	}
	db := s.database(w)
	if db == nil {
		return
	}
	release, ok := s.maintain(w, maintBackup)
	if !ok {
		return
	}
	defer release()
	start := time.Now()
	f, info, err := s.spoolBackup(db)
	if err != nil {
		var ns *noSpaceError
		if errors.As(err, &ns) {
			writeError(w, http.StatusInsufficientStorage, api.CodeNoSpace, err.Error())
			return
		}
		s.cfg.Log.Error().Err(err).Msg("backup failed")
		writeError(w, http.StatusInternalServerError, api.CodeInternal, err.Error())
		return
	}
	defer f.Close()
	copied := time.Since(start)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="`+filepath.Base(s.cfg.DBPath)+`"`)
	h.Set("Content-Length", strconv.FormatInt(info.Bytes, 10))
	h.Set(api.HeaderBackupSHA256, info.SHA256)
	h.Set(api.HeaderBackupTxID, strconv.Itoa(info.TxID))
	h.Set("Cache-Control", "no-store")
	dw := &deadlineWriter{w: w, rc: http.NewResponseController(w)}
	dw.deadline()
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	n, err := io.Copy(dw, bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		s.cfg.Log.Warn().Err(err).Int64("sent", n).Int64("bytes", info.Bytes).Msg("backup aborted mid-response")
		return
	}
	s.cfg.Log.Info().Int64("bytes", info.Bytes).Int("txid", info.TxID).Str("sha256", info.SHA256).
		Int64("copy_ms", copied.Milliseconds()).Int64("took_ms", time.Since(start).Milliseconds()).Msg("backup sent")
}

// noSpaceError: the database's file system has less free space than a
// backup needs.
type noSpaceError struct {
	dir         string
	need, avail int64
}

func (e *noSpaceError) Error() string {
	return fmt.Sprintf("a backup needs %d MiB free in %s (the database's size and %d MiB), and %d MiB are",
		e.need>>20, e.dir, backupSpaceMargin>>20, e.avail>>20)
}

// spoolBackup writes a backup of db into an unlinked file in the spool
// directory and returns it positioned at its start.
func (s *Server) spoolBackup(db *store.DB) (*os.File, store.BackupInfo, error) {
	var info store.BackupInfo
	fi, err := os.Stat(s.cfg.DBPath)
	if err != nil {
		return nil, info, fmt.Errorf("backup: %w", err)
	}
	dir := store.SpoolDir(s.cfg.DBPath)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, info, fmt.Errorf("backup: create spool directory %s: %w", dir, err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil {
		avail := int64(st.Bavail) * int64(st.Bsize)
		if need := fi.Size() + backupSpaceMargin; avail < need {
			return nil, info, &noSpaceError{dir: dir, need: need, avail: avail}
		}
	}
	f, err := os.CreateTemp(dir, "backup-*"+store.SpoolSuffix)
	if err != nil {
		return nil, info, fmt.Errorf("backup: create a spool file in %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
		}
	}()
	if err := os.Remove(f.Name()); err != nil {
		return nil, info, fmt.Errorf("backup: unlink spool file %s: %w", f.Name(), err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if info, err = db.Backup(bw); err != nil {
		return nil, info, err
	}
	if err := bw.Flush(); err != nil {
		return nil, info, fmt.Errorf("backup: write spool file in %s: %w", dir, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, info, fmt.Errorf("backup: %w", err)
	}
	ok = true
	return f, info, nil
}
