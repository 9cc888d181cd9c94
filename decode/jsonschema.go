package decode

import (
	"encoding/json"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/jsonschema"

	"github.com/kmaterialize/kmaterialize/fold"
)

// decodeJSONSchema decodes one framed JSON Schema payload with
// confluent's jsonschema deserializer into the raw JSON text (a generic
// decode would turn every number into a float64), and canonicalizes it.
func (d *Decoder) decodeJSONSchema(c *codec, b []byte, where fold.Position) ([]byte, error) {
	f, err := d.framedSchema(b, jsonschema.SchemaType, "JSON Schema", where)
	if err != nil {
		return nil, err
	}
	key := f.key
	if err := jsonDepth(f.body); err != nil {
		return nil, badf(err, "not JSON of %s", key)
	}
	var raw json.RawMessage
	err = safely(func() error { return c.jsonSchema.DeserializeInto(d.topic, b, &raw) })
	if err != nil {
		if rf := d.registryFailure(err, key.String(), where); rf != nil {
			return nil, rf
		}
		return nil, badf(err, "not JSON of %s", key)
	}
	out, err := fold.CanonicalJSON(raw)
	if err != nil {
		return nil, badf(err, "not JSON of %s", key)
	}
	return out, nil
}
