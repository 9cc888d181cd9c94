package decode

import (
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/avrov2"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/jsonschema"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/protobuf"

	"github.com/kmaterialize/kmaterialize/fold"
)

// codec decodes one side (key or value) of the records.
type codec struct {
	format     Format
	avro       *avrov2.Deserializer
	proto      *protobuf.Deserializer
	jsonSchema *jsonschema.Deserializer
}

// newCodec returns the codec of format f for side t; nil for Raw.
func (d *Decoder) newCodec(f Format, t serde.Type) (*codec, error) {
	c := &codec{format: f}
	var err error
	switch f {
	case Raw:
		return nil, nil
	case Avro:
		c.avro, err = avrov2.NewDeserializer(d.client, t, avrov2.NewDeserializerConfig())
		if err == nil {
			c.avro.SubjectNameStrategy = noSubject
		}
	case Protobuf:
		c.proto, err = protobuf.NewDeserializer(d.client, t, protobuf.NewDeserializerConfig())
		if err == nil {
			c.proto.SubjectNameStrategy = noSubject
		}
	case JSONSchema:
		c.jsonSchema, err = jsonschema.NewDeserializer(d.client, t, jsonschema.NewDeserializerConfig())
		if err == nil {
			c.jsonSchema.SubjectNameStrategy = noSubject
		}
	}
	if err != nil {
		return nil, &SettingError{Msg: "schema registry " + string(f) + " deserializer: " + scrub(err.Error(), d.reg.secrets()), Err: err}
	}
	return c, nil
}

// decode returns the canonical JSON of b, a non-empty key or a non-null
// value.
func (c *codec) decode(d *Decoder, b []byte, where fold.Position) ([]byte, error) {
	switch c.format {
	case Avro:
		return d.decodeAvro(c, b, where)
	case Protobuf:
		return d.decodeProtobuf(c, b, where)
	case JSONSchema:
		return d.decodeJSONSchema(c, b, where)
	}
	if err := jsonDepth(b); err != nil {
		return nil, badf(err, "not JSON")
	}
	out, err := fold.CanonicalJSON(b)
	if err != nil {
		return nil, badf(err, "not JSON")
	}
	return out, nil
}
