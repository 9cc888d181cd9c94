package api

// Dropped is the answer to DELETE /v1/tables/{table}: the table dropped,
// and its generation and rows as they were.
type Dropped struct {
	Table      string `json:"dropped"`
	Generation uint64 `json:"generation"`
	Keys       int64  `json:"keys"`
}
