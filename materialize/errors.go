package materialize

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/kmaterialize/kmaterialize/store"
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

// ErrTooManyChanges is returned (as a *ChangeLimitError) when a rebuild
// would add, remove or change more than Options.MaxChange percent of the
// published table's keys. Nothing is published.
var ErrTooManyChanges = errors.New("rebuild would change too much of the table")

// ChangeLimitError is the refusal of a publish above --max-change, with the
// counts. It matches ErrTooManyChanges.
type ChangeLimitError struct {
	Table      string
	Changes    store.Changes
	MaxPercent float64
}

// Percent is the share of the previous generation's keys the rebuild
// would add, remove or change.
func (e *ChangeLimitError) Percent() float64 {
	return changePercent(e.Changes)
}

// Error returns e.g. `table "balances": this rebuild would add 10, remove
// 400 and change 5 of its 1000 keys (41.5%), above --max-change 10%:
// refusing to publish it; the published table is unchanged`.
func (e *ChangeLimitError) Error() string {
	c := e.Changes
	return fmt.Sprintf("table %q: this rebuild would add %d, remove %d and change %d of its %d keys (%s%%), above --max-change %s%%: "+
		"refusing to publish it; the published table (generation %d) is unchanged",
		e.Table, c.Added, c.Removed, c.Changed, c.FromKeys, strconv.FormatFloat(e.Percent(), 'f', -1, 64),
		strconv.FormatFloat(e.MaxPercent, 'f', -1, 64), c.From)
}

// Is reports whether target is ErrTooManyChanges.
func (e *ChangeLimitError) Is(target error) bool { return target == ErrTooManyChanges }

// changePercent is the keys added, removed or changed as a percentage of
// the previous generation's keys (0 when it had none).
func changePercent(c store.Changes) float64 {
	if c.FromKeys <= 0 {
		return 0
	}
	p := float64(c.Total()) * 100 / float64(c.FromKeys)
	return math.Round(p*100) / 100
}
