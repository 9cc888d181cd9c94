package checkpoint

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Check reports what is wrong with the checkpoint of table, a published
// table of topic, in tx (one message per problem): it must load, name the
// table's topic, and hold positions Save would accept. store.CheckCheckpoint
// is this as a store.CheckOptions.Table hook.
func Check(tx *bolt.Tx, table, topic string) []string {
	cp, ok, err := Load(tx, table)
	switch {
	case err != nil:
		return []string{err.Error()}
	case !ok:
		return []string{"no checkpoint"}
	}
	var out []string
	if cp.Topic != topic {
		out = append(out, fmt.Sprintf("checkpoint is of topic %q, the table of topic %q", cp.Topic, topic))
	}
	if err := validate(table, cp); err != nil {
		out = append(out, err.Error())
	}
	return out
}
