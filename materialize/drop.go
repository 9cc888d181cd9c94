package materialize

import (
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

// Drop removes table from db in one transaction: its entry, its
// generations and its checkpoint (see store.DB.DropTable). An absent table
// is a *store.TableNotFoundError. The CLI and the daemon both call it; the
// daemon must not drop a table it is rebuilding.
func Drop(db *store.DB, table string) (store.TableMeta, error) {
	return db.DropTable(table, func(tx *bolt.Tx) error { return checkpoint.Delete(tx, table) })
}
