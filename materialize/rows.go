package materialize

import (
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/store"
)

// foldTable is the fold.Table a Folder folds into: the store's rows of the
// write transaction (Generation.Write, DB.Apply) and their private indexes.
type foldTable struct{ store.Rows }

// Index returns the store's private index called name, as a fold.KV.
func (t foldTable) Index(name string) (fold.KV, error) {
	kv, err := t.Rows.Index(name)
	if err != nil {
		return nil, err
	}
	return kv, nil
}

var _ fold.Table = foldTable{}
