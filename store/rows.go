package store

// KV is one ordered namespace of a write transaction: the rows of a
// generation, or one of its private indexes. Keys are ordered by their
// bytes. It is valid only during the write callback that handed it out.
type KV interface {
	// Get returns the value for key: nil if the key is absent, a non-nil
	// (possibly empty) slice if present. The slice is valid until the next
	// write.
	Get(key []byte) ([]byte, error)
	// Put stores value under key, copying it: callers may reuse their
	// buffers. An empty key is ErrEmptyKey.
	Put(key, value []byte) error
	// Delete removes key; an absent key is not an error.
	Delete(key []byte) error
}

// Rows is what a write callback (Generation.Write, DB.Apply) gets: the
// rows of the generation, and the generation's private indexes by name.
// Indexes live inside the generation and are dropped with it; they are
// never visible as rows.
type Rows interface {
	KV
	// Index returns the private namespace called name, creating it. An
	// empty name is ErrInvalidName.
	Index(name string) (KV, error)
}
