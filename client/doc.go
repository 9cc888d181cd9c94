// Package client is a Go client of the kmaterialize daemon's HTTP API (see
// package serve): it owns the wire side of that API, the request paths and
// parameters and the mapping of error responses to typed errors; the
// response types are package api's, under aliases (Table = api.Table,
// ...). The kmaterialize CLI's routed commands use it; other Go programs on
// the host can import it to read tables without opening the database file.
//
// # Connecting
//
// Dial names the daemon's unix socket (by default the database path with
// ".sock" appended; the database's holder record names it too, see
// store.ReadHolder). DialURL names its TCP listen address instead, with the
// admin token that state-changing routes need there. Neither connects
// before the first request; every method takes a context, which bounds the
// request (the client sets no timeout of its own: a rebuild with wait may
// take as long as the rebuild).
//
// # Errors
//
// An error response of the API is an *Error carrying the HTTP status and
// the API's code (CodeKeyNotFound, CodeTableNotFound, ...). A daemon that
// cannot be reached at all (no socket file, nobody listening) is an error
// that matches ErrUnreachable. A daemon holding a table over some of its
// topic's partitions (a shard, docs/shards.md) answers a key of another
// partition with CodeKeyNotHere (NotHere gives the key's partition and the
// daemon's partition set), and, without a partitioner, an absent key with
// a partial CodeKeyNotFound (IsPartial): the key may be on another daemon.
// Anything else (a response cut short, a body
// that does not decode) is returned as is, wrapped with the route.
//
// # Consistency
//
// Every read is answered from one published generation, which the methods
// return. Rows pages through a table and pins every page after the first to
// the first page's generation: when a rebuild publishes a new generation
// mid-scan, the next page fails with CodeGenerationGone rather than mixing
// two generations, and the caller starts over.
package client
