package api

// The change feed: GET /v1/tables/{table}/changes?from=CURSOR (or
// from=now), an application/x-ndjson stream that stays open, one line per
// JSON object:
//
//	{"key":K,"value":V}     a key's new value (a count table: a group's new count)
//	{"key":K,"value":null}  a key deleted
//	{"commit":FEEDSTATE}    after the changes of one atomic commit
//	{"heartbeat":FEEDSTATE} every few seconds without a commit
//	{"error":FEEDERROR}     the stream's last line when the daemon ends it
//
// A copy that held the table at the from cursor and applied every change
// line up to a commit line holds exactly the table at that commit's
// positions; the commit's cursor resumes after it. Keys and values are
// text as in the rows route (UTF-8, or base64 with encoding=base64).

// Query parameters of the change feed.
const (
	// ParamFrom is where the feed starts: a Kmaterialize-Cursor (of a
	// read answer or of a commit line), or FromNow.
	ParamFrom = "from"
	// FromNow starts the feed at the table's current state.
	FromNow = "now"
)

// FeedChange is a change line: Value nil (null) when the key was deleted.
type FeedChange struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

// FeedState is a commit's or a heartbeat's state of the table: its
// positions, generation and cursor.
type FeedState struct {
	Positions  Positions `json:"positions"`
	Generation uint64    `json:"generation"`
	Cursor     string    `json:"cursor"`
}

// FeedError ends a stream: Code is CodeWatcherTooSlow (resume from the
// last commit's cursor), CodeShuttingDown (resume at another daemon or
// later), CodeCursorGone (the table's feed restarted: list again) or
// CodeInternal.
type FeedError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// FeedLine is any line of the feed, for decoding: a change line has Key
// (and Value, nil for a deletion), the others exactly one of Commit,
// Heartbeat and Error. The daemon writes change lines as FeedChange (a
// deletion's null value is not omitted).
type FeedLine struct {
	Key       *string    `json:"key,omitempty"`
	Value     *string    `json:"value,omitempty"`
	Commit    *FeedState `json:"commit,omitempty"`
	Heartbeat *FeedState `json:"heartbeat,omitempty"`
	Error     *FeedError `json:"error,omitempty"`
}
