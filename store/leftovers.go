// Leftover cleanup: the files beside the database that a crashed process
// leaves (run files, spooled answers and feed commits, compaction
// temporaries; their names are in schema.go), removed by a read-write Open.

package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cleanFiles removes the run files and compaction temporaries a crashed
// process left beside the database, returning how many. Only a read-write
// Open calls it: it holds the exclusive lock, so no rebuild or compaction
// is using them. A FILE.runs that is not a directory is left alone.
func cleanFiles(path string) (int, error) {
	n := 0
	for _, d := range []struct{ dir, suffix, what string }{
		{RunsDir(path), runSuffix, "run"},
		{SpoolDir(path), SpoolSuffix, "spool"},
		{FeedDir(path), FeedSuffix, "feed spool"},
	} {
		dir := d.dir
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return n, fmt.Errorf("remove leftover %s files in %s: %w", d.what, dir, err)
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), d.suffix) {
				continue
			}
			p := dir + string(os.PathSeparator) + e.Name()
			if err := os.Remove(p); err != nil {
				return n, fmt.Errorf("remove leftover %s file %s: %w", d.what, p, err)
			}
			n++
		}
		_ = os.Remove(dir) // only if empty
	}
	parent, base := filepath.Dir(path), filepath.Base(path)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return n, nil // a directory we cannot list holds nothing we made
	}
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), base+CompactTempPrefix) {
			p := parent + string(os.PathSeparator) + e.Name()
			if err := os.Remove(p); err != nil {
				return n, fmt.Errorf("remove leftover compaction file %s: %w", p, err)
			}
			n++
		}
	}
	return n, nil
}
