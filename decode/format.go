package decode

import (
	"fmt"
	"strings"
)

// Format is how a record's key or value is encoded.
type Format string

// The formats, as --key-format, --value-format and the config file's
// key_format and value_format spell them.
const (
	// Raw stores the bytes as they are (the default).
	Raw Format = "raw"
	// JSON checks that the bytes are one JSON value and stores its
	// canonical form.
	JSON Format = "json"
	// Avro is Schema Registry framed Avro.
	Avro Format = "avro"
	// Protobuf is Schema Registry framed Protobuf.
	Protobuf Format = "protobuf"
	// JSONSchema is Schema Registry framed JSON (JSON Schema).
	JSONSchema Format = "jsonschema"
)

// Formats lists every format, in the order help texts show them.
var Formats = []Format{Raw, JSON, Avro, Protobuf, JSONSchema}

// FormatNames is "raw|json|avro|protobuf|jsonschema", for help texts.
var FormatNames = func() string {
	s := make([]string, len(Formats))
	for i, f := range Formats {
		s[i] = string(f)
	}
	return strings.Join(s, "|")
}()

// ParseFormat parses a format name; "" is Raw.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return Raw, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("format %q: want %s", s, FormatNames)
}

// Valid reports whether f is one of Formats or "" (Raw).
func (f Format) Valid() bool {
	_, err := ParseFormat(string(f))
	return err == nil
}

// NeedsRegistry reports whether decoding f needs a Schema Registry.
func (f Format) NeedsRegistry() bool {
	return f == Avro || f == Protobuf || f == JSONSchema
}

// orRaw returns f, or Raw for "".
func (f Format) orRaw() Format {
	if f == "" {
		return Raw
	}
	return f
}
