// Package dbdamage damages kmaterialize database files at offsets computed
// from their real layout, for the tests of how damage is reported. It reads
// the layout through bbolt and store (before the damage) and writes with
// plain file I/O; nothing in the product imports it.
package dbdamage

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/store"
)

// Layout is where a table's rows live in a file.
type Layout struct {
	PageSize int
	// Pgid is the high-water mark of the meta page in use: pages in use.
	Pgid uint64
	// RowsRoot is the root page of the table's rows bucket (a branch page
	// when the rows span several pages); 0 when the bucket is inline.
	RowsRoot uint64
	// Leaves are the rows root's children when it is a branch page, in key
	// order.
	Leaves []uint64
}

// Inspect opens path read-only and returns the layout of table's rows.
func Inspect(path, table string) (Layout, error) {
	var l Layout
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		return l, err
	}
	defer db.Close()
	m, err := db.Table(table)
	if err != nil {
		return l, err
	}
	err = db.View(func(tx *bolt.Tx) error {
		l.PageSize = tx.DB().Info().PageSize
		l.Pgid = uint64(tx.Size()) / uint64(l.PageSize)
		rows := tx.Bucket(store.BucketGenerations).Bucket(store.GenerationKey(m.Generation)).Bucket(store.BucketRows)
		l.RowsRoot = uint64(rows.RootPage())
		return nil
	})
	if err != nil || l.RowsRoot == 0 {
		return l, err
	}
	page, err := ReadPage(path, l.PageSize, l.RowsRoot)
	if err != nil {
		return l, err
	}
	const branchFlag = 0x01
	if binary.LittleEndian.Uint16(page[8:])&branchFlag == 0 {
		return l, nil
	}
	// A branch page: 16-byte header (id, flags, count, overflow), then
	// count elements of {pos uint32, ksize uint32, pgid uint64}.
	count := int(binary.LittleEndian.Uint16(page[10:]))
	for i := 0; i < count; i++ {
		e := page[16+16*i:]
		l.Leaves = append(l.Leaves, binary.LittleEndian.Uint64(e[8:]))
	}
	return l, nil
}

// ReadPage returns page id of the file.
func ReadPage(path string, pageSize int, id uint64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, pageSize)
	if _, err := f.ReadAt(b, int64(id)*int64(pageSize)); err != nil {
		return nil, fmt.Errorf("read page %d of %s: %w", id, path, err)
	}
	return b, nil
}

// WritePage overwrites page id of the file with b.
func WritePage(path string, pageSize int, id uint64, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, int64(id)*int64(pageSize)); err != nil {
		f.Close()
		return fmt.Errorf("write page %d of %s: %w", id, path, err)
	}
	return f.Close()
}

// Garbage overwrites page id, header included, with random bytes from seed
// whose header does not name page id (so bbolt's page check fails on it
// rather than reading garbage as data).
func Garbage(path string, pageSize int, id, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	b := make([]byte, pageSize)
	for {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if binary.LittleEndian.Uint64(b) != id {
			break
		}
	}
	return WritePage(path, pageSize, id, b)
}

// ZeroMetas zeroes both meta pages.
func ZeroMetas(path string, pageSize int) error {
	z := make([]byte, pageSize)
	if err := WritePage(path, pageSize, 0, z); err != nil {
		return err
	}
	return WritePage(path, pageSize, 1, z)
}

// SetBranchChild makes element i of branch page id point at page child.
func SetBranchChild(path string, pageSize int, id uint64, i int, child uint64) error {
	b, err := ReadPage(path, pageSize, id)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(b[16+16*i+8:], child)
	return WritePage(path, pageSize, id, b)
}
