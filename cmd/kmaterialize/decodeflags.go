package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kmaterialize/kmaterialize/config"
	"github.com/kmaterialize/kmaterialize/decode"
)

// decodeFlags are the flags of a table's key and value formats and the
// Schema Registry's URL. Registry credentials have no flag: argv shows in
// ps.
func decodeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "value-format", Value: string(decode.Raw),
			Usage: "how record values are decoded before the fold: " + decode.FormatNames + "; json and the Schema Registry formats (avro, protobuf, jsonschema: need --schema-registry) are stored as canonical JSON; an undecodable value is a bad record (--on-bad-record)"},
		&cli.StringFlag{Name: "key-format", Value: string(decode.Raw),
			Usage: "how record keys are decoded: " + decode.FormatNames + " (a decoded key is its canonical JSON text, e.g. \"acct-1\" with the quotes)"},
		schemaRegistryFlag(),
	}
}

// schemaRegistryFlag is --schema-registry, on every command that decodes
// records (rebuild, update).
func schemaRegistryFlag() cli.Flag {
	return &cli.StringFlag{Name: "schema-registry", EnvVars: []string{decode.EnvURL},
		Usage: "Schema Registry `URL`, e.g. http://localhost:8081 (default: the config file's schema_registry.url); credentials from the config file or " + decode.EnvUser + ", " + decode.EnvPassword + " or " + decode.EnvToken + ", never from the command line"}
}

// decodeHelp is the paragraph on the formats in rebuild's help.
const decodeHelp = `
Values (--value-format) and keys (--key-format) are stored as they are (raw,
the default), or decoded before the fold and stored as canonical JSON (sorted
keys, no insignificant whitespace): json, or Confluent Schema Registry framed
avro, protobuf or jsonschema, which need --schema-registry URL (or
` + decode.EnvURL + `, or schema_registry.url in the config file). Registry
credentials come from the config file's schema_registry section or from
` + decode.EnvUser + ` and ` + decode.EnvPassword + ` (basic) or
` + decode.EnvToken + ` (bearer), never from flags. Each value is decoded
with the schema version it was written with. A record that cannot be decoded
(unknown schema id, no Schema Registry frame, truncated) is a bad record:
exit 3 naming its partition and offset, or left out and counted with
--on-bad-record skip. A registry that cannot be reached exits 5.`

// registrySettings returns the Schema Registry settings: the config
// file's section, overridden by the environment, then by
// --schema-registry. A URL given on the command line must not carry a
// password.
func registrySettings(c *cli.Context) (decode.Registry, error) {
	var r decode.Registry
	if cfg, ok := c.App.Metadata[metaConfig].(*config.Config); ok {
		r = cfg.SchemaRegistry.Registry()
	}
	r = r.WithEnv(os.LookupEnv)
	if c.IsSet("schema-registry") {
		r.URL = strings.TrimSpace(c.String("schema-registry"))
		for _, one := range strings.Split(r.URL, ",") {
			if u, err := url.Parse(strings.TrimSpace(one)); err == nil && u.User != nil {
				return r, &usageError{msg: "--schema-registry: a URL with user information would show the credentials in ps",
					hint: fmt.Sprintf("give the URL without them and the credentials in %s and %s, or in the config file's schema_registry section", decode.EnvUser, decode.EnvPassword)}
			}
		}
	}
	return r, nil
}
