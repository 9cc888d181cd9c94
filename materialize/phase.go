package materialize

import "context"

// replayedKey is the context key of WithReplayed's hook.
type replayedKey struct{}

// WithReplayed returns a context whose Rebuild or Update calls f once its
// replay has read everything it will read (for a followed table's
// rebuild: after the catch-up), before the merge and the publish. From
// then on the run reads no Kafka and ends by itself; the daemon uses the
// hook to let such a run finish at shutdown and to refuse cancelling it.
// f is called at most once per Rebuild or Update, on the caller's
// goroutine, and must not block.
func WithReplayed(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, replayedKey{}, f)
}

// replayed calls ctx's WithReplayed hook, if any.
func replayed(ctx context.Context) {
	if f, ok := ctx.Value(replayedKey{}).(func()); ok && f != nil {
		f()
	}
}
