// Package api owns the daemon's HTTP API on the wire: the JSON documents it
// answers (tables, runs, errors), their state names and error codes, and
// its Kmaterialize-* headers, marshalled exactly as the daemon sends them.
package api
