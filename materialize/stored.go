package materialize

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/replay"
	"github.com/kmaterialize/kmaterialize/store"
)

// ErrNoSpec is returned (as a *NoSpecError) by LoadSpec when a table has no
// stored definition: it was built before tables stored theirs, or by a
// caller that gave none. A rebuild from a definition (flags or the config
// file) stores one.
var ErrNoSpec = errors.New("table has no stored definition")

// NoSpecError names the table without a stored definition. It matches
// ErrNoSpec.
type NoSpecError struct {
	Table string
	Path  string // the database file
}

// Error returns e.g. `table "votes" in votes.db has no stored definition
// (it was built before tables stored theirs): rebuild it once with
// kmaterialize rebuild, which stores it`.
func (e *NoSpecError) Error() string {
	return fmt.Sprintf("table %q in %s has no stored definition (it was built before tables stored theirs): rebuild it once with kmaterialize rebuild, which stores it",
		e.Table, e.Path)
}

// Is reports whether target is ErrNoSpec.
func (e *NoSpecError) Is(target error) bool { return target == ErrNoSpec }

// LoadSpec returns the definition stored with table in db at its last
// publish: a *store.TableNotFoundError (store.ErrTableNotFound) for a table
// that is not there, a *NoSpecError (ErrNoSpec) for one without a stored
// definition.
func LoadSpec(db *store.DB, table string) (Spec, error) {
	m, err := db.Table(table)
	if err != nil {
		return Spec{}, err
	}
	return specOf(db, m)
}

// specOf decodes the definition stored in m.
func specOf(db *store.DB, m store.TableMeta) (Spec, error) {
	if len(m.Spec) == 0 {
		return Spec{}, &NoSpecError{Table: m.Name, Path: db.Path()}
	}
	var s Spec
	if err := json.Unmarshal(m.Spec, &s); err != nil {
		return Spec{}, fmt.Errorf("table %q in %s: stored definition: %w: %v", m.Name, db.Path(), store.ErrCorrupt, err)
	}
	s.Name = m.Name
	return s, nil
}

// encodeSpec returns the JSON stored in a table's metadata: opts.Spec, or
// for a latest fold without one, the definition its options imply. nil for
// a fold whose definition cannot be told from its options.
func encodeSpec(opts Options) ([]byte, error) {
	s := opts.Spec
	if s == nil {
		if _, ok := opts.Fold.(*fold.Latest); !ok {
			return nil, nil
		}
		end := opts.Replay.End
		if end == "" {
			end = replay.EndHigh
		}
		s = &Spec{Topic: opts.Replay.Topic, Fold: FoldLatest, End: end, StallTimeout: opts.Replay.StallTimeout}
	}
	c := *s
	c.Name = opts.Table
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("table %q: encode its definition: %w", opts.Table, err)
	}
	return b, nil
}
