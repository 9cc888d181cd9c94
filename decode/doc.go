// Package decode owns the decoding of record keys and values before the
// fold: raw bytes as they are, JSON, and Confluent Schema Registry framed
// Avro, Protobuf and JSON Schema, each turned into canonical JSON (sorted
// keys, no insignificant whitespace: fold.CanonicalJSON), so that a table
// of such a topic is readable without the registry. It knows the registry's
// REST API (through confluent-kafka-go's schemaregistry client and serdes)
// but neither Kafka's wire protocol nor bbolt.
//
// # Rules
//
// A null key or value (a tombstone) stays null, before any deserializer
// sees it; an empty key is left to the fold (which skips it). Every value
// is decoded with the schema it was written with (its schema id), so a
// topic whose records use several versions of a schema folds into one
// table whose rows have the shape of their own version; nothing is
// projected onto the latest version.
//
// A record that cannot be decoded (no Schema Registry frame, a truncated
// frame, a schema id the registry does not know, bytes that do not match
// the schema, not JSON) is a bad record: a *fold.DataError of kind
// fold.ReasonUndecodable naming its partition and offset, or, with
// fold.SkipBadRecords, left out and counted. A registry that cannot be
// reached, refuses the credentials or answers with a server error is a
// *RegistryError (ErrUnavailable): no record is at fault, so it is never
// skipped.
//
// No record can crash the process: the libraries allocate from the
// lengths and counts a record's bytes give, and recurse as deep as its
// values nest, and an out-of-memory or a stack overflow is a fatal error
// that no recover() sees. So every count and length is checked against
// the bytes that remain, and the nesting against MaxDepth, before a
// library is handed the record (bounds.go): what fails a check is a bad
// record like any other.
//
// # JSON mapping
//
// Avro: records and maps are objects, arrays arrays, enums their symbol;
// a union is the plain value of its branch (never {"type": value}); int
// and long are exact JSON integers; float and double the shortest decimal
// that reads back as the same number ("NaN", "Infinity", "-Infinity" as
// strings); decimal (bytes or fixed) an exact JSON number with the value's
// digits (the canonical form drops trailing zeros: 12.50 is 12.5); bytes
// and fixed base64 (standard, padded); date "YYYY-MM-DD"; timestamps RFC
// 3339 in UTC; time-millis and time-micros the integer of the schema's
// unit after midnight; uuid a string; duration an object with months,
// days and milliseconds.
//
// Protobuf: the proto3 JSON mapping (protojson) with the .proto file's
// field names and every field present (defaults included): int64, uint64
// and their fixed/sint kinds are strings, bytes base64, enums their name,
// well-known types their JSON forms. The message type is built at run
// time from the registry's schema (dynamicpb), once per schema id and
// message index, so no generated Go types are needed.
//
// JSON Schema: the JSON text as written, canonicalized (numbers keep all
// their digits); it is not validated against the schema, whose id must
// still be known to the registry.
package decode
