package materialize

import (
	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/store"
)

// FoldTable is foldTable for the external tests: r as the fold.Table a
// Folder folds into.
func FoldTable(r store.Rows) fold.Table { return foldTable{r} }
