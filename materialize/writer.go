package materialize

import (
	"context"
	"errors"
	"sync"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/store"
)

// errWriterFailed is what the replay sees when the writer has stopped; the
// writer's own error is reported instead.
var errWriterFailed = errors.New("table writer failed")

// writer folds batches into the generation on its own goroutine, so the
// replay keeps polling while a transaction commits. It buffers record
// batches up to a byte budget and folds them in one write transaction:
// memory is bounded by the budget plus the batches in the channel.
type writer struct {
	gen    *store.Generation
	folder fold.Folder
	budget int

	in   chan []fold.Record
	done chan struct{} // closed when the goroutine ends
	err  error         // set by the goroutine before done closes
	once sync.Once
}

func newWriter(gen *store.Generation, f fold.Folder, budget int) *writer {
	return &writer{gen: gen, folder: f, budget: budget,
		in: make(chan []fold.Record, 4), done: make(chan struct{})}
}

func (w *writer) start(ctx context.Context) {
	go w.loop(ctx)
}

// send hands a batch to the writer. It is the replay's Sink.
func (w *writer) send(batch []fold.Record) error {
	select {
	case w.in <- batch:
		return nil
	case <-w.done:
		return errWriterFailed
	}
}

// close ends the input, waits for the goroutine and returns its error.
func (w *writer) close() error {
	w.once.Do(func() { close(w.in) })
	<-w.done
	return w.err
}

func (w *writer) loop(ctx context.Context) {
	defer close(w.done)
	var pending []fold.Record
	size := 0
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		err := w.gen.Write(func(t fold.Table) error { return w.folder.Fold(t, pending) })
		pending, size = pending[:0:0], 0
		return err
	}
	for batch := range w.in {
		if ctx.Err() != nil {
			w.err = ctx.Err()
			w.drain()
			return
		}
		pending = append(pending, batch...)
		for i := range batch {
			size += len(batch[i].Key) + len(batch[i].Value) + 64
		}
		if size >= w.budget {
			if err := flush(); err != nil {
				w.err = err
				w.drain()
				return
			}
		}
	}
	w.err = flush()
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
