// Package config owns kmaterialize's YAML configuration file: the database
// and its socket, who may reach the daemon, the Kafka connection, the
// Schema Registry, and the tables, each a materialize.Spec plus a schedule.
//
// # Rules
//
// Load reads the whole file and checks it before anything starts: an
// unknown field, a value of the wrong kind, an unknown fold, a repeated
// table name, a bad schedule, socket mode or listen address, an unset
// ${NAME} in a Kafka property, or a catalog that cannot be read is an
// *Error (ErrInvalid) that names the file and the line. The CLI maps it to
// exit 2.
//
// Relative paths (db, socket, catalog) are relative to the directory of the
// config file, not to the working directory, so a file means the same
// whoever starts the process from wherever.
//
// # Secrets
//
// Kafka property values whose key names a secret (IsSecretKey), the
// schema_registry password and bearer_token, and the admin token never
// appear in errors, logs or JSON: Properties and Secret
// redact themselves in String, MarshalJSON and zerolog output, and Scrub
// removes secret property values from an error's message.
package config
