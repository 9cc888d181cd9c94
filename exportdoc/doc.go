// Package exportdoc owns the export format: a table, its provenance (topic,
// fold and parameters, per-partition bounds) and its rows as one JSON
// document that depends only on the data, never on the clock.
//
// Two rebuilds of the same frozen batch export byte-identical documents: no
// wall-clock field, no generation number, rows in key order, parameters and
// counters with sorted keys. WriteFile replaces its target atomically; on any
// error the previous file is untouched.
package exportdoc
