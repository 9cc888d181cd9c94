package materialize

import (
	"context"
	"errors"
	"sync"
	"unsafe"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/store"
)

// errWriterFailed is what the replay sees when the writer has stopped; the
// writer's own error is reported instead.
var errWriterFailed = errors.New("table writer failed")

// writer folds batches into the generation off the replay's goroutine, so
// the replay keeps polling while a transaction folds and commits. It is two
// stages: a collector buffers record batches up to the byte budget, then
// hands the buffer to a folder that folds it in one write transaction while
// the collector fills the next buffer. At most one buffer is being folded
// and one filled, and the batches sent but not yet collected are bounded by
// the queue budget (send waits for room), so memory is bounded by twice
// the budget plus the queue's, never by the number of records read.
//
// The queue lets the replay keep polling through a slow fold or spill
// instead of stalling on send.
//
// The latest and count folds are sorted externally instead
// (fold.Latest.SortExternally, fold.Count.SortExternally): their Fold calls
// only update the rows (identities) they hold in memory, outside any
// transaction; when they reach the hold budget, the folder stage writes
// them as a sorted run file (store.Generation.SpillRun), and finish merges
// the runs and the rows still held into the generation in key order
// (store.Generation.WriteMerged; the count fold's identities into its index
// with store.Generation.WriteMergedIndex, then its rows), so bbolt only
// ever appends.
//
// With a share (Options.CPU), the folder stage folds each replay batch
// (spilling when the hold budget is reached), or each buffer's write
// transaction, in a slot, and yields between them; the collector only
// appends and takes none. A slot is taken before a write transaction
// begins and given back after it ends (cpushare's rules).
type writer struct {
	gen    *store.Generation
	folder fold.Folder
	budget int
	sorter sorter          // the folder, when sorted externally
	runs   int             // run files spilled
	share  *cpushare.Share // nil: unlimited

	in    chan sizedBatch
	queue queue         // bounds the bytes of the batches in `in`
	done  chan struct{} // closed when both stages have ended
	err   error         // set before done closes
	once  sync.Once
}

// sorter is a fold sorted externally: fold.Latest or fold.Count.
type sorter interface {
	Fold(t fold.Table, batch []fold.Record) error
	Full() bool
	Sorted() *fold.SortedRows
	Reset()
}

// inBatches is the capacity, in replay batches, of the writer's input;
// the queue's byte budget is what bounds it.
const inBatches = 256

// sizedBatch is a replay batch and its size (batchSize).
type sizedBatch struct {
	records []fold.Record
	size    int
}

// recordSize is the memory of one fold.Record in a batch, without its
// bytes.
const recordSize = int(unsafe.Sizeof(fold.Record{}))

// batchSize is the memory a batch holds: its array (all of its capacity)
// and its records' keys and values.
func batchSize(b []fold.Record) int {
	n := cap(b) * recordSize
	for i := range b {
		n += len(b[i].Key) + len(b[i].Value)
	}
	return n
}

// queue bounds the bytes of the batches sent to the writer and not yet
// taken by its collector. There is one sender (the replay).
type queue struct {
	mu    sync.Mutex
	bytes int
	limit int
	room  chan struct{} // a token: bytes went down
}

// reserve waits until size bytes fit (a batch bigger than the limit goes
// alone), or done closes.
func (q *queue) reserve(size int, done <-chan struct{}) bool {
	for {
		q.mu.Lock()
		if q.bytes == 0 || q.bytes+size <= q.limit {
			q.bytes += size
			q.mu.Unlock()
			return true
		}
		q.mu.Unlock()
		select {
		case <-q.room:
		case <-done:
			return false
		}
	}
}

func (q *queue) release(size int) {
	q.mu.Lock()
	q.bytes -= size
	q.mu.Unlock()
	select {
	case q.room <- struct{}{}:
	default:
	}
}

// newWriter returns a writer that buffers budget bytes of records per
// hand-off, lets the replay queue up to queued bytes of batches ahead of
// it, and, for the latest and count folds, holds up to hold bytes of rows
// (identities) in memory before spilling a run.
func newWriter(gen *store.Generation, f fold.Folder, budget, queued, hold int) *writer {
	w := &writer{gen: gen, folder: f, budget: budget,
		in: make(chan sizedBatch, inBatches), done: make(chan struct{}),
		queue: queue{limit: queued, room: make(chan struct{}, 1)}}
	switch f := f.(type) {
	case *fold.Latest:
		f.SortExternally(hold)
		w.sorter = f
	case *fold.Count:
		f.SortExternally(hold)
		w.sorter = f
	}
	return w
}

func (w *writer) start(ctx context.Context) {
	go w.loop(ctx)
}

// send hands a batch to the writer, once the queue has room for it. It is
// the replay's Sink.
func (w *writer) send(batch []fold.Record) error {
	b := sizedBatch{records: batch, size: batchSize(batch)}
	if !w.queue.reserve(b.size, w.done) {
		return errWriterFailed
	}
	select {
	case w.in <- b:
		return nil
	case <-w.done:
		return errWriterFailed
	}
}

// close ends the input, waits for both stages and returns the first error.
func (w *writer) close() error {
	w.once.Do(func() { close(w.in) })
	<-w.done
	return w.err
}

// write folds one buffer in one transaction.
func (w *writer) write(fn func(t fold.Table) error) error {
	return w.gen.Write(func(r store.Rows) error { return fn(foldTable{r}) })
}

// writeIn is write in a slot of the share.
func (w *writer) writeIn(ctx context.Context, fn func(t fold.Table) error) error {
	return w.share.Do(ctx, func() error { return w.write(fn) })
}

// finish runs the fold's Finish in one transaction, after close; for the
// latest fold, it merges the runs and the held rows into the generation
// (paced by the share: store.Generation.Pace).
func (w *writer) finish(ctx context.Context) error {
	if w.sorter == nil {
		return w.writeIn(ctx, w.folder.Finish)
	}
	w.runs = w.gen.Runs()
	if c, ok := w.sorter.(*fold.Count); ok {
		err := w.gen.WriteMergedIndex(ctx, fold.IdentityIndex, c.Sorted(), c.CombineIdentities)
		c.Reset()
		if err != nil {
			return err
		}
		// The rows (one per group) and the conflict check, now that the
		// merge has counted.
		return w.writeIn(ctx, c.Finish)
	}
	err := w.gen.WriteMerged(ctx, w.sorter.Sorted())
	w.sorter.Reset()
	return err
}

// foldSorted folds one buffer into the rows the latest fold holds, and
// spills them as a run once they reach the hold budget. It folds foldChunk
// records at a time, so a buffer bigger than the hold budget still spills
// when the budget is reached, not after the whole buffer. Each replay
// batch of the buffer (and the spill it fills) is one unit of the share.
func (w *writer) foldSorted(ctx context.Context, buf [][]fold.Record) error {
	for _, batch := range buf {
		if err := w.share.Do(ctx, func() error { return w.foldBatch(batch) }); err != nil {
			return err
		}
	}
	return nil
}

// foldBatch folds one replay batch into the held rows, spilling a run
// each time they reach the hold budget.
func (w *writer) foldBatch(batch []fold.Record) error {
	for len(batch) > 0 {
		n := min(len(batch), foldChunk)
		if err := w.sorter.Fold(nil, batch[:n]); err != nil {
			return err
		}
		batch = batch[n:]
		if !w.sorter.Full() {
			continue
		}
		if err := w.gen.SpillRun(w.sorter.Sorted()); err != nil {
			return err
		}
		w.sorter.Reset()
	}
	return nil
}

// foldChunk is how many records foldSorted folds between checks of the
// hold budget.
const foldChunk = 256

// A buffer is the replay's batches as they came, up to the budget: kept,
// not copied into one slice.
func (w *writer) loop(ctx context.Context) {
	defer close(w.done)
	full := make(chan [][]fold.Record) // collector -> folder; unbuffered
	failed := make(chan struct{})      // closed by the folder on its first error
	var foldErr error
	folded := make(chan struct{})
	go func() {
		defer close(folded)
		for pending := range full {
			if foldErr != nil {
				continue
			}
			if w.sorter != nil {
				foldErr = w.foldSorted(ctx, pending)
			} else {
				foldErr = w.writeIn(ctx, func(t fold.Table) error {
					for _, b := range pending {
						if err := w.folder.Fold(t, b); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if foldErr != nil {
				close(failed)
			}
		}
	}()
	err := w.collect(ctx, full, failed)
	close(full)
	<-folded
	switch {
	case foldErr != nil:
		w.err = foldErr
	case err != nil:
		w.err = err
	}
	if w.err != nil {
		w.drain()
	}
}

// collect buffers batches up to the budget and hands each full buffer to
// the folder. It returns ctx's error, or errWriterFailed once the folder
// failed.
func (w *writer) collect(ctx context.Context, full chan<- [][]fold.Record, failed <-chan struct{}) error {
	var pending [][]fold.Record
	size := 0
	handOff := func() error {
		select {
		case full <- pending:
		case <-failed:
			return errWriterFailed
		}
		pending, size = nil, 0
		return nil
	}
	for b := range w.in {
		w.queue.release(b.size)
		if err := ctx.Err(); err != nil {
			return err
		}
		pending = append(pending, b.records)
		size += b.size
		if size >= w.budget {
			if err := handOff(); err != nil {
				return err
			}
		}
	}
	if len(pending) == 0 {
		return nil
	}
	return handOff()
}

// drain discards what the replay still sends until it notices; send also
// returns once done is closed, so this only empties the buffer.
func (w *writer) drain() {
	for {
		select {
		case _, ok := <-w.in:
			if !ok {
				return
			}
		default:
			return
		}
	}
}
