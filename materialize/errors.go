package materialize

import (
	"errors"
	"fmt"
)

// ErrWouldEmpty is returned (as an *EmptyTableError) when a rebuild would
// replace a table that has rows contributed by records with one that has
// none, and Options.AllowEmpty is off. Nothing is published.
var ErrWouldEmpty = errors.New("rebuild would empty the table")

// EmptyTableError is the refusal to publish an empty table over a
// non-empty one. It matches ErrWouldEmpty.
type EmptyTableError struct {
	Table   string
	OldKeys int64 // rows of the published table that would be replaced
	Records int64 // records the rebuild read
	Skipped int64 // of which skipped
}

// Error returns e.g. `table "balances" has 120 keys and this rebuild found
// no record that contributes a row (0 records read): refusing to replace it
// with an empty table; the published table is unchanged`.
func (e *EmptyTableError) Error() string {
	return fmt.Sprintf("table %q has %d keys and this rebuild found no record that contributes a row (%d records read, %d skipped): "+
		"refusing to replace it with an empty table (--allow-empty publishes it); the published table is unchanged",
		e.Table, e.OldKeys, e.Records, e.Skipped)
}

// Is reports whether target is ErrWouldEmpty.
func (e *EmptyTableError) Is(target error) bool { return target == ErrWouldEmpty }
