package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
)

// CheckOptions configures Check. A nil *CheckOptions means the defaults.
type CheckOptions struct {
	// LockTimeout is as in Options.
	LockTimeout time.Duration
	// PageCheck runs bbolt's page walk (see PageCheck). nil skips it, with
	// a warning in the report: running it in this process could end it.
	PageCheck PageCheck
	// Table, if not nil, checks what other packages keep per table (package
	// checkpoint's positions) inside the read transaction of the schema
	// check; it returns one message per problem.
	Table func(tx *bolt.Tx, t TableMeta) []string
}

// CheckCheckpoint is the CheckOptions.Table hook for package checkpoint's
// positions: checkpoint.Check of the published table t.
func CheckCheckpoint(tx *bolt.Tx, t TableMeta) []string {
	return checkpoint.Check(tx, t.Name, t.Topic)
}

// CheckReport is what Check found. Problems are corruption: the file or its
// schema contradicts itself. Warnings are states a healthy file passes
// through (an unpublished generation, an older format version, a torn meta
// page bbolt recovers from) that the next read-write open resolves.
type CheckReport struct {
	Path          string   `json:"path"`
	FormatVersion uint64   `json:"format_version"`
	Tables        int      `json:"tables"`
	Generations   int      `json:"generations"`
	Problems      []string `json:"problems"`
	Warnings      []string `json:"warnings"`
}

// OK reports whether Check found no problem (warnings allowed).
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

// Err returns a *CorruptError summing up the problems, or nil.
func (r *CheckReport) Err() error {
	if r.OK() {
		return nil
	}
	reason := r.Problems[0]
	if n := len(r.Problems); n > 1 {
		reason = fmt.Sprintf("%s (and %d more problems)", reason, n-1)
	}
	return &CorruptError{Path: r.Path, Reason: reason}
}

// problem adds a problem once: the page walk and the schema check can
// trip on the same damaged page.
func (r *CheckReport) problem(format string, args ...any) {
	p := fmt.Sprintf(format, args...)
	for _, q := range r.Problems {
		if q == p {
			return
		}
	}
	r.Problems = append(r.Problems, p)
}

func (r *CheckReport) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// Check verifies the database at path without changing it: its meta pages
// and size, every page (opts.PageCheck), and the schema's invariants (see
// checkSchema). The report lists each problem; the error is for what keeps
// Check from looking (a missing file, a busy one, a file that is not bbolt
// or of a newer format version: ErrFormat, not corruption).
func Check(path string, opts *CheckOptions) (*CheckReport, error) {
	var o CheckOptions
	if opts != nil {
		o = *opts
	}
	r := &CheckReport{Path: path, Problems: []string{}, Warnings: []string{}}
	rep, err := preflight(path)
	var ce *CorruptError
	switch {
	case errors.As(err, &ce):
		r.problem("%s", ce.Reason)
		return r, nil
	case err != nil:
		if errors.Is(err, ErrFormat) {
			return nil, err
		}
		return nil, notExistOr(path, err)
	case rep.empty:
		return nil, notExist(path, true)
	}
	r.Warnings = append(r.Warnings, rep.warnings...)

	if len(rep.warnings) > 0 && o.PageCheck != nil {
		r.warn("bbolt's full page check cannot run past a torn meta page: only the page walk of a read-write open was done")
	}
	if o.PageCheck == nil {
		r.warn("bbolt's page walk was skipped")
	} else if err := o.PageCheck(path, o.LockTimeout, true); err != nil {
		if !errors.As(err, &ce) {
			return nil, err
		}
		r.problem("%s", ce.Reason)
		// The schema check reads only what the page walk could not
		// crash on in-process; go on, under guard, for a fuller report.
	}

	db, err := Open(path, &Options{ReadOnly: true, LockTimeout: o.LockTimeout})
	if err != nil {
		if errors.As(err, &ce) {
			r.problem("%s", ce.Reason)
			return r, nil
		}
		return nil, err
	}
	defer db.Close()
	err = db.view(func(tx *bolt.Tx) error { return checkSchema(tx, r, o.Table) })
	if errors.As(err, &ce) {
		r.problem("%s", ce.Reason)
	} else if err != nil {
		return nil, err
	}
	return r, nil
}

func notExistOr(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return notExist(path, false)
	}
	return err
}

// checkSchema checks the layout of schema.go:
//   - the top-level buckets and the format version exist, the version is
//     this build's or an older readable one (a warning: a read-write open
//     migrates it);
//   - every table's metadata decodes, names itself, and names a generation
//     that exists, was begun for it, has a rows bucket, and is named by no
//     other table;
//   - TableMeta.Keys equals the number of rows (a walk of every row);
//   - from v2, a published generation says "published" and records the same
//     row count;
//   - every table has a checkpoint, and every checkpoint a table;
//   - the generation counter is at or above every generation number;
//   - generations no table names are warnings (a rebuild in progress, or
//     the leftover of one interrupted: the next read-write open removes
//     them), except kept generations of an existing table, which must
//     hold their metadata, checkpoint and row count (checkKept).
func checkSchema(tx *bolt.Tx, r *CheckReport, extra func(*bolt.Tx, TableMeta) []string) error {
	meta := tx.Bucket(BucketMeta)
	if meta == nil {
		r.problem("the meta bucket is missing")
		return nil
	}
	switch v, ok := decodeUint64(meta.Get(KeyFormatVersion)); {
	case !ok:
		r.problem("format version is %x, not a version number", meta.Get(KeyFormatVersion))
		return nil
	case v > FormatVersion:
		r.problem("format version %d is newer than this build's %d", v, FormatVersion)
		return nil
	case v < FormatVersion:
		r.warn("format version %d: the next read-write open (kmaterialize rebuild) migrates it to %d", v, FormatVersion)
		r.FormatVersion = v
	default:
		r.FormatVersion = v
	}
	tables, gens, cps := tx.Bucket(BucketTables), tx.Bucket(BucketGenerations), tx.Bucket(BucketCheckpoints)
	for name, b := range map[string]*bolt.Bucket{"tables": tables, "generations": gens, "checkpoints": cps} {
		if b == nil {
			r.problem("the %s bucket is missing", name)
		}
	}
	if tables == nil || gens == nil || cps == nil {
		return nil
	}
	seq, seqOK := decodeUint64(meta.Get(KeyGenerationSeq))
	if meta.Get(KeyGenerationSeq) != nil && !seqOK {
		r.problem("the generation counter is %x, not a number", meta.Get(KeyGenerationSeq))
	}

	// Every generation, by number, and which table names it.
	type genInfo struct {
		table  string // the generation's own "table" key
		state  string
		keys   []byte
		rows   *bolt.Bucket
		namers []string
	}
	all := map[uint64]*genInfo{}
	var order []uint64
	c := gens.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		n, ok := decodeUint64(k)
		if v != nil || !ok {
			r.problem("generations holds %x, which is not a generation bucket", k)
			continue
		}
		gb := gens.Bucket(k)
		all[n] = &genInfo{table: string(gb.Get(KeyGenerationTable)), state: string(gb.Get(KeyGenerationState)),
			keys: gb.Get(KeyGenerationKeys), rows: gb.Bucket(BucketRows)}
		order = append(order, n)
		if n > seq {
			r.problem("generation %d is above the generation counter %d", n, seq)
		}
	}
	r.Generations = len(all)

	err := tables.ForEach(func(k, v []byte) error {
		r.Tables++
		m, err := decodeMeta(k, v)
		if err != nil {
			r.problem("%v", err)
			return nil
		}
		if m.Name != string(k) {
			r.problem("table %q: its metadata names it %q", k, m.Name)
		}
		g := all[m.Generation]
		if g == nil {
			r.problem("table %q: its published generation %d does not exist", k, m.Generation)
			return nil
		}
		g.namers = append(g.namers, string(k))
		if g.table != string(k) {
			r.problem("table %q: generation %d was begun for table %q", k, m.Generation, g.table)
		}
		if g.rows == nil {
			r.problem("table %q: generation %d has no rows bucket", k, m.Generation)
			return nil
		}
		n := countKeys(g.rows)
		if m.Keys != int64(n) {
			r.problem("table %q: metadata says %d keys, generation %d holds %d rows", k, m.Keys, m.Generation, n)
		}
		if r.FormatVersion >= 2 {
			if g.state != StatePublished {
				r.problem("table %q: generation %d is published but its state is %q", k, m.Generation, g.state)
			}
			if gk, ok := decodeUint64(g.keys); !ok {
				r.problem("table %q: generation %d records no row count (%x)", k, m.Generation, g.keys)
			} else if gk != n {
				r.problem("table %q: generation %d recorded %d rows at publish, holds %d", k, m.Generation, gk, n)
			}
		}
		if cps.Bucket(k) == nil {
			r.problem("table %q has no checkpoint", k)
		} else if extra != nil {
			for _, p := range extra(tx, m) {
				r.problem("table %q: %s", k, p)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, n := range order {
		g := all[n]
		switch {
		case len(g.namers) > 1:
			sort.Strings(g.namers)
			r.problem("generation %d is published by several tables: %v", n, g.namers)
		case len(g.namers) == 0 && g.state == StateKept:
			checkKept(tables.Get([]byte(g.table)) != nil, gens.Bucket(GenerationKey(n)), g.rows, n, g.table, r)
		case len(g.namers) == 0:
			if g.state == StatePublished {
				r.problem("generation %d of table %q says it is published, but no table names it", n, g.table)
			} else {
				r.warn("generation %d of table %q is unpublished (a rebuild in progress or interrupted): the next read-write open removes it", n, g.table)
			}
		}
	}
	return cps.ForEach(func(k, v []byte) error {
		if v != nil || tables.Get(k) == nil {
			r.problem("checkpoint %q belongs to no table", bytes.Clone(k))
		}
		return nil
	})
}

// checkKept checks kept generation n of table: its metadata decodes and
// names it, its checkpoint copy exists, and its recorded row count is the
// rows it holds. A kept generation of a table that no longer exists is a
// warning: the next read-write open removes it.
func checkKept(tableExists bool, gb, rows *bolt.Bucket, n uint64, table string, r *CheckReport) {
	if !tableExists {
		r.warn("generation %d is kept for table %q, which no longer exists: the next read-write open removes it", n, table)
		return
	}
	m, err := decodeMeta([]byte(table), gb.Get(KeyGenerationMeta))
	switch {
	case err != nil:
		r.problem("kept generation %d of table %q: %v", n, table, err)
	case m.Generation != n:
		r.problem("kept generation %d of table %q: its metadata names generation %d", n, table, m.Generation)
	}
	if !checkpoint.HasKept(gb) {
		r.problem("kept generation %d of table %q has no checkpoint", n, table)
	}
	if rows == nil {
		r.problem("kept generation %d of table %q has no rows bucket", n, table)
		return
	}
	c := countKeys(rows)
	if gk, ok := decodeUint64(gb.Get(KeyGenerationKeys)); !ok || gk != c {
		r.problem("kept generation %d of table %q recorded %d rows, holds %d", n, table, gk, c)
	}
	if err == nil && m.Keys != int64(c) {
		r.problem("kept generation %d of table %q: metadata says %d keys, it holds %d rows", n, table, m.Keys, c)
	}
}
