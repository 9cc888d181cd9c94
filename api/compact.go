package api

// CompactResult is the answer of POST /v1/compact: the database file's
// size before and after, how long writers waited (the copy and the swap)
// and how long readers did (the swap alone).
type CompactResult struct {
	Before   int64   `json:"before"`
	After    int64   `json:"after"`
	PausedMS int64   `json:"paused_ms"`
	SwapMS   float64 `json:"swap_ms"`
}
