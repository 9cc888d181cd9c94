package store

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// A reader that answers a client at the client's pace must not hold a bbolt
// read transaction meanwhile: a commit that grows the file remaps it, the
// remap waits for every read transaction, every writer waits for the remap
// and new readers queue behind the waiting writer (see base.go). A Pager
// reads one generation of a table in pages, each in its own short read
// transaction, so that the longest read transaction is one page at disk
// speed.
//
// Pages of different transactions are one state only if the generation did
// not change between them. A generation changes in two ways, and a Pager
// guards against both:
//   - in place, by Apply (a follower or an incremental update): every Apply
//     moves the generation's write sequence on before it commits and after
//     (a seqlock: pinSet.begin), and each page checks, inside its
//     transaction, that the sequence is the one the Pager started with
//     (else *PagerStaleError);
//   - by removal: a publish that replaces it, a prune of kept generations,
//     a drop. A Pager pins its generation: a publish that would delete a
//     pinned generation retires it instead (state StateRetired, no table
//     points at it) and the last Pager to let go deletes it. A crash in
//     between leaves a retired generation, which the next read-write Open
//     removes like any unpublished one. Pruning and drops do not wait for
//     pins: a page then finds the generation gone (*PagerStaleError).
//
// So a Pager reads the state its generation had when the Pager was made,
// or fails with *PagerStaleError; it never mixes two states.

// ErrPagerStale is returned (as a *PagerStaleError) by Pager.Page when the
// generation it reads was changed in place or removed since the Pager was
// made: the pages read so far and the ones that would follow are not one
// state.
var ErrPagerStale = errors.New("generation changed while it was paged")

// PagerStaleError names the table, the generation and what happened.
type PagerStaleError struct {
	Table      string
	Generation uint64
	Reason     string // "changed in place", "removed"
}

func (e *PagerStaleError) Error() string {
	return fmt.Sprintf("table %q: generation %d was %s while it was read in pages: %v", e.Table, e.Generation, e.Reason, ErrPagerStale)
}

// Is reports whether target is ErrPagerStale.
func (e *PagerStaleError) Is(target error) bool { return target == ErrPagerStale }

// pagerAttempts bounds how often NewPager starts again when a publish
// removed the generation between its lookup and its pin, or an in-place
// write was under way.
const pagerAttempts = 5

// Pager reads the rows of one generation of a table in pages (see the
// comment above). Its methods are not safe for concurrent use; Close it
// when done (it unpins the generation).
type Pager struct {
	// Meta is the table's metadata as the Pager's first transaction saw
	// it; Meta.Generation is the generation it reads.
	Meta   TableMeta
	db     *DB
	seq    uint64
	closed bool
}

// NewPager pins the published generation of table and returns a Pager over
// it. first, if not nil, runs inside a read transaction in which the
// generation is pinned and unchanged, with a Snapshot of it: the caller
// reads there what must agree with the rows (the checkpoint). A missing
// table is a *TableNotFoundError.
func (db *DB) NewPager(table string, first func(s *Snapshot) error) (*Pager, error) {
	for attempt := 1; ; attempt++ {
		m, err := db.Table(table)
		if err != nil {
			return nil, err
		}
		gen := m.Generation
		db.pins.pin(gen) // waits while a publish is deleting gen
		p := &Pager{Meta: m, db: db}
		gone, writing := false, false
		err = db.view(func(tx *bolt.Tx) error {
			gb := genBucket(tx, gen)
			if gb == nil {
				gone = true
				return nil
			}
			// The metadata of this transaction: the first one saw the
			// table before any change the pin now keeps out.
			now, rows, err := db.lookup(tx, table)
			if err != nil {
				return err
			}
			if now.Generation != gen {
				gone = true // replaced before the pin: read the new one
				return nil
			}
			p.Meta, p.seq = now, db.pins.writes(gen)
			if p.seq%2 == 1 {
				writing = true // may or may not be in this transaction: again
				return nil
			}
			if first != nil {
				return first(&Snapshot{Meta: now, Tx: tx, rows: rows})
			}
			return nil
		})
		if err != nil || gone || writing {
			db.pins.unpin(db, gen)
		}
		switch {
		case err != nil:
			return nil, err
		case !gone && !writing:
			return p, nil
		case attempt == pagerAttempts:
			return nil, fmt.Errorf("read table %q in pages: its generation was replaced or written in place %d times before it could be pinned", table, attempt)
		case writing:
			db.pins.awaitNoWrite(gen)
		}
	}
}

// Page calls fn for the rows of r above after (nil: from r's start), in key
// order, in one read transaction: at most limit rows (limit <= 0: no
// bound) whose keys and values make at most maxBytes (maxBytes <= 0: no
// bound), except that a first row larger than maxBytes comes alone. more
// reports whether r holds rows after the last one given; last is a copy of
// its key. k and v are valid only during fn.
// A generation changed or removed since NewPager is a *PagerStaleError
// before fn is called.
func (p *Pager) Page(r Range, after []byte, limit, maxBytes int, fn func(k, v []byte) error) (last []byte, more bool, err error) {
	if p.closed {
		return nil, false, fmt.Errorf("read table %q in pages: the pager is closed", p.Meta.Name)
	}
	gen := p.Meta.Generation
	err = p.db.view(func(tx *bolt.Tx) error {
		rows := generationRows(tx, gen)
		if rows == nil {
			return &PagerStaleError{Table: p.Meta.Name, Generation: gen, Reason: "removed"}
		}
		if p.db.pins.writes(gen) != p.seq {
			return &PagerStaleError{Table: p.Meta.Name, Generation: gen, Reason: "changed in place"}
		}
		s := &Snapshot{Meta: p.Meta, Tx: tx, rows: rows}
		n, size := 0, 0
		return s.RangeAfter(r, after, 0, func(k, v []byte) error {
			// A row that would take the page past maxBytes starts the
			// next page, unless it is the first: it then comes alone.
			if (limit > 0 && n >= limit) || (maxBytes > 0 && n > 0 && size+len(k)+len(v) > maxBytes) {
				more = true
				return errPageFull
			}
			if err := fn(k, v); err != nil {
				return err
			}
			n++
			size += len(k) + len(v)
			last = append(last[:0], k...)
			return nil
		})
	})
	if errors.Is(err, errPageFull) {
		err = nil
	}
	return last, more, err
}

// errPageFull ends a page's cursor walk.
var errPageFull = errors.New("page full")

// Close unpins the generation; a retired one whose last Pager this was is
// deleted. It is idempotent.
func (p *Pager) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	return p.db.pins.unpin(p.db, p.Meta.Generation)
}

// pinSet is the DB's record of pinned generations and of each generation's
// in-place write sequence. This process is the file's only writer (the
// read-write lock), so memory is enough.
type pinSet struct {
	mu       sync.Mutex
	cond     *sync.Cond
	count    map[uint64]int    // Pagers per pinned generation
	deleting map[uint64]bool   // a publish decided to delete it and has not finished
	retired  map[uint64]bool   // retired by a committed publish, to delete at the last unpin
	seq      map[uint64]uint64 // in-place write sequence per generation (begin, end)
	waiting  int               // NewPagers waiting for an in-place write to end
}

func (ps *pinSet) init() {
	if ps.count == nil {
		ps.cond = sync.NewCond(&ps.mu)
		ps.count, ps.deleting, ps.retired, ps.seq = map[uint64]int{}, map[uint64]bool{}, map[uint64]bool{}, map[uint64]uint64{}
	}
}

func (ps *pinSet) pin(gen uint64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.init()
	for ps.deleting[gen] {
		ps.cond.Wait()
	}
	ps.count[gen]++
}

// unpin drops a pin; at the last one, a retired generation is deleted.
func (ps *pinSet) unpin(db *DB, gen uint64) error {
	ps.mu.Lock()
	ps.init()
	ps.count[gen]--
	drop := ps.count[gen] <= 0 && ps.retired[gen]
	if ps.count[gen] <= 0 {
		delete(ps.count, gen)
		delete(ps.retired, gen)
	}
	ps.mu.Unlock()
	if drop {
		return db.dropRetired(gen)
	}
	return nil
}

// claim is Publish's question before it deletes gen: true (and gen marked
// as being deleted until settle) when no Pager holds it; false when one
// does, and the publish retires gen instead.
func (ps *pinSet) claim(gen uint64) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.init()
	if ps.count[gen] > 0 {
		return false
	}
	ps.deleting[gen] = true
	return true
}

// settle ends what claim began, once the publish's transaction is over
// (committed tells whether it committed). For a generation the publish
// retired, it reports whether the caller must delete it now: its Pagers
// let go meanwhile.
func (ps *pinSet) settle(gen uint64, claimed, committed bool) (dropNow bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.init()
	if claimed {
		delete(ps.deleting, gen)
		ps.cond.Broadcast()
		return false
	}
	if !committed {
		return false
	}
	if ps.count[gen] > 0 {
		ps.retired[gen] = true
		return false
	}
	return true
}

// begin and end bracket an in-place write to gen, like a seqlock: Apply
// calls begin inside its transaction, before the commit (the sequence
// becomes odd), and end once the transaction is over, committed or not
// (even again). A Pager reads the sequence inside each page's transaction,
// after it began: a write whose commit that transaction sees had called
// begin before, so a first page that reads an even sequence saw no write
// half done, and a later page that reads the same sequence began before
// any later write's commit. A write that then fails to commit makes a
// Pager fail for nothing, which is safe.
func (ps *pinSet) begin(gen uint64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.init()
	ps.seq[gen]++
}

func (ps *pinSet) end(gen uint64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.init()
	ps.seq[gen]++
	ps.cond.Broadcast()
}

// writes returns gen's write sequence (odd while a write is under way).
func (ps *pinSet) writes(gen uint64) uint64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.seq[gen]
}

// awaitNoWrite waits until no in-place write to gen is under way.
func (ps *pinSet) awaitNoWrite(gen uint64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.init()
	ps.waiting++
	for ps.seq[gen]%2 == 1 {
		ps.cond.Wait()
	}
	ps.waiting--
}

// retire marks gen, which a publish is replacing while a Pager reads it,
// as StateRetired in tx instead of deleting it.
func retire(tx *bolt.Tx, gen uint64) error {
	gb := genBucket(tx, gen)
	if gb == nil {
		return nil
	}
	return setGenerationState(gb, StateRetired, 0)
}

// dropRetired deletes generation gen if it is still retired (a publish
// retired it and no table points at it).
func (db *DB) dropRetired(gen uint64) error {
	err := guard(db.path, func() error {
		return db.update(func(tx *bolt.Tx) error {
			gb := genBucket(tx, gen)
			if gb == nil || !bytes.Equal(gb.Get(KeyGenerationState), []byte(StateRetired)) {
				return nil
			}
			err := tx.Bucket(BucketGenerations).DeleteBucket(GenerationKey(gen))
			if errors.Is(err, bolterrors.ErrBucketNotFound) {
				return nil
			}
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("delete retired generation %d in %s: %w", gen, db.path, err)
	}
	return nil
}
