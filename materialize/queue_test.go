package materialize

import (
	"testing"

	"github.com/kmaterialize/kmaterialize/fold"
)

// TestQueueBoundsBytes: the writer's queue admits batches while their
// bytes fit its limit (one batch bigger than the limit alone), refuses
// one that would pass it (reserve returns false once the writer is done
// rather than admitting it), and admits it again after the collector has
// taken enough out; and a batch's size counts its whole array and its
// keys and values.
func TestQueueBoundsBytes(t *testing.T) {
	done := make(chan struct{})
	close(done) // a writer that has ended: reserve must not wait forever
	q := queue{limit: 100, room: make(chan struct{}, 1)}
	if !q.reserve(250, done) || q.bytes != 250 {
		t.Fatalf("an empty queue refused a batch over its limit (bytes %d)", q.bytes)
	}
	if q.reserve(1, done) {
		t.Fatalf("a queue over its limit admitted a batch (bytes %d)", q.bytes)
	}
	q.release(250)
	if !q.reserve(60, done) || !q.reserve(40, done) || q.bytes != 100 {
		t.Fatalf("batches within the limit refused (bytes %d)", q.bytes)
	}
	if q.reserve(1, done) || q.bytes != 100 {
		t.Fatalf("a full queue admitted a batch (bytes %d)", q.bytes)
	}
	q.release(60)
	if !q.reserve(50, done) || q.bytes != 90 {
		t.Fatalf("a batch that fits after a release was refused (bytes %d)", q.bytes)
	}

	b := make([]fold.Record, 2, 5)
	b[0] = fold.Record{Key: []byte("ab"), Value: []byte("cde")}
	b[1] = fold.Record{Key: []byte("f")}
	if got, want := batchSize(b), 5*recordSize+6; got != want {
		t.Fatalf("batchSize %d, want %d (the array's capacity and the bytes)", got, want)
	}
}
