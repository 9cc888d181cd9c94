// Package config owns kmaterialize's YAML configuration file: the database
// and its socket, who may reach the daemon, the Kafka connection, the
// Schema Registry, and the tables, each a materialize.Spec plus a schedule.
//
// # Rules
//
// Load reads the whole file and checks it before anything starts: an
// unknown field, a value of the wrong kind, an unknown fold, a repeated
// table name, a bad schedule, socket mode or listen address, an unset
// ${NAME}, a ${ in a field that does not expand, or a catalog that cannot
// be read is an *Error (ErrInvalid) that names the file and the line. The
// CLI maps it to exit 2.
//
// # ${NAME}
//
// ${NAME} is replaced by the environment variable NAME, once, at load, in
// exactly these fields: ExpandingFields (db, socket, admin_token,
// read_token, metrics_token, tls_cert, tls_key, kafka.brokers, the
// kafka.properties values, schema_registry, a table's catalog; tagged
// expand:"env" on the file format's struct). A ${ in any
// other field is refused, so that the file never says what it does not do;
// $${ is a literal ${ in every field. See expand.go.
//
// Relative paths (db, socket, tls_cert, tls_key, catalog) are relative to
// the directory of the config file, not to the working directory, so a
// file means the same whoever starts the process from wherever.
//
// # Secrets
//
// Kafka property values whose key names a secret (IsSecretKey), the
// schema_registry password and bearer_token, and the listener's tokens
// (admin_token, read_token, metrics_token) never appear in errors, logs or
// JSON: Properties and Secret
// redact themselves in String, MarshalJSON and zerolog output, and Scrub
// removes secret property values from an error's message.
//
// Config.Secrets finds every secret of a loaded config by type: each
// Secret field and each secret-named Properties value, wherever it sits.
// A section added to the file opts its credentials in with one line, by
// declaring the field as Secret (e.g. SchemaRegistry.Password Secret,
// filled with Secret(expanded)). The CLI and the daemon hand Secrets (and
// the -F and -X secrets) to a Redactor, which removes the values from
// every line written to stderr, the final error and the daemon's stored
// run errors: text that libraries shape, such as a librdkafka message
// quoting a value.
//
// LoadProperties reads a kcat-style properties file (-F).
package config
