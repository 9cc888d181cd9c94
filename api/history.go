package api

// RollbackResult is the answer to POST .../rollback.
type RollbackResult struct {
	// Generation is the generation published now.
	Generation uint64 `json:"generation"`
	// From is the generation published before, now kept.
	From uint64 `json:"from"`
	// Keys is the number of keys of the generation published now.
	Keys int64 `json:"keys"`
}
