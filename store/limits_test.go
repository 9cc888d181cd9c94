package store

import (
	"bytes"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/kmaterialize/kmaterialize/fold"
)

// TestKeyLimitMatchesBolt: fold.MaxKeySize, which the folds check before
// writing, is bbolt's limit: a key of that size is stored, one byte more is
// what bbolt refuses.
func TestKeyLimitMatchesBolt(t *testing.T) {
	if fold.MaxKeySize != bolt.MaxKeySize {
		t.Fatalf("fold.MaxKeySize %d, bbolt's MaxKeySize %d", fold.MaxKeySize, bolt.MaxKeySize)
	}
	db := openTemp(t)
	g, err := db.Begin("limits")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Abort()
	if has, err := g.HasRows(); err != nil || has {
		t.Fatalf("HasRows of a new generation = %v, %v", has, err)
	}
	edge := bytes.Repeat([]byte("k"), fold.MaxKeySize)
	if err := g.Write(func(tb Rows) error { return tb.Put(edge, []byte("v")) }); err != nil {
		t.Fatalf("put a key of MaxKeySize bytes: %v", err)
	}
	over := append(edge, 'k')
	if err := g.Write(func(tb Rows) error { return tb.Put(over, []byte("v")) }); !errors.Is(err, bolterrors.ErrKeyTooLarge) {
		t.Fatalf("put a key of MaxKeySize+1 bytes = %v, want bbolt's ErrKeyTooLarge", err)
	}
	if has, err := g.HasRows(); err != nil || !has {
		t.Fatalf("HasRows after a put = %v, %v", has, err)
	}
}
