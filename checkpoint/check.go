package checkpoint

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/store"
)

// CheckTable is a store.CheckOptions.Table hook: it reports what is wrong
// with the checkpoint of the published table m in tx (one message per
// problem): it must load, name the table's topic, and hold positions Save
// would accept.
func CheckTable(tx *bolt.Tx, m store.TableMeta) []string {
	cp, ok, err := Load(tx, m.Name)
	switch {
	case err != nil:
		return []string{err.Error()}
	case !ok:
		return []string{"no checkpoint"}
	}
	var out []string
	if cp.Topic != m.Topic {
		out = append(out, fmt.Sprintf("checkpoint is of topic %q, the table of topic %q", cp.Topic, m.Topic))
	}
	if err := validate(m.Name, cp); err != nil {
		out = append(out, err.Error())
	}
	return out
}
