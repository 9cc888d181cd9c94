package decode

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/avrov2"
	"github.com/hamba/avro/v2"

	"github.com/kmaterialize/kmaterialize/fold"
)

// decodeAvro decodes one framed Avro payload with confluent's avrov2
// deserializer into a generic value (DeserializeInto: the generic
// Deserialize panics without registered types), then turns the value into
// JSON by walking the writer's schema alongside it: the generic value
// alone cannot tell a union's wrapper from a map, nor a decimal's scale.
func (d *Decoder) decodeAvro(c *codec, b []byte, where fold.Position) ([]byte, error) {
	f, err := d.framedSchema(b, avrov2.SchemaType, "Avro", where)
	if err != nil {
		return nil, err
	}
	s, key := f.schema, f.key
	w, ok := s.built.(avro.Schema)
	if !ok {
		w, err = d.avroSchema(s.info)
		if err != nil {
			if rf := d.registryFailure(err, "the references of "+key.String(), where); rf != nil {
				return nil, rf
			}
			return nil, badf(err, "%s is not a usable Avro schema", key)
		}
		s.built = w
	}
	// hamba allocates from the lengths and counts it reads (the avrov2
	// serde's hamba config is its own, with no allocation bound that
	// can be set), so they are checked against the bytes first.
	if err := avroCheck(w, f.body); err != nil {
		return nil, badf(err, "not Avro of %s", key)
	}
	var v any
	err = safely(func() error { return c.avro.DeserializeInto(d.topic, b, &v) })
	if err != nil {
		if rf := d.registryFailure(err, key.String(), where); rf != nil {
			return nil, rf
		}
		return nil, badf(err, "not Avro of %s", key)
	}
	j, err := avroJSON(w, v, true)
	if err != nil {
		return nil, badf(err, "not Avro of %s", key)
	}
	return canonical(j)
}

// avroSchema parses info (its references first, into hamba's schema
// cache, as the avrov2 serde does).
func (d *Decoder) avroSchema(info schemaregistry.SchemaInfo) (avro.Schema, error) {
	for _, ref := range info.References {
		meta, err := d.client.GetSchemaMetadataIncludeDeleted(ref.Subject, ref.Version, true)
		if err != nil {
			return nil, err
		}
		if _, err := d.avroSchema(meta.SchemaInfo); err != nil {
			return nil, err
		}
	}
	return avro.Parse(info.Schema)
}

// canonical returns the canonical JSON text of v, a tree of maps, slices,
// strings, bools, json.Number and nil.
func canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, badf(err, "cannot write as JSON")
	}
	out, err := fold.CanonicalJSON(b)
	if err != nil {
		return nil, badf(err, "cannot write as JSON")
	}
	return out, nil
}

// avroJSON returns v, a value hamba decoded into an interface with schema
// s, as a JSON tree (see the package doc's mapping). eface says how hamba
// decoded v (hamba/avro v2.24.0): the whole value and a record's fields go
// through its "eface" decoder, which decodes a union as a map of the
// branch's name to the value, always; an array's items and a map's values
// are decoded into the slice's or map's interface elements, where a union
// is the plain value when every branch is a type its resolver knows
// (unionWrapped), and the map form otherwise.
func avroJSON(s avro.Schema, v any, eface bool) (any, error) {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return nil, nil
	case *avro.PrimitiveSchema:
		return avroPrimitive(s, v)
	case *avro.RecordSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("record %s decoded as %T", s.FullName(), v)
		}
		out := make(map[string]any, len(s.Fields()))
		for _, f := range s.Fields() {
			fv, err := avroJSON(f.Type(), m[f.Name()], true)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", s.FullName(), f.Name(), err)
			}
			out[f.Name()] = fv
		}
		return out, nil
	case *avro.EnumSchema:
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("enum %s decoded as %T", s.FullName(), v)
		}
		return str, nil
	case *avro.ArraySchema:
		rv := reflect.ValueOf(v)
		if v == nil {
			return []any{}, nil
		}
		if rv.Kind() != reflect.Slice {
			return nil, fmt.Errorf("array decoded as %T", v)
		}
		out := make([]any, rv.Len())
		for i := range out {
			e, err := avroJSON(s.Items(), rv.Index(i).Interface(), false)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = e
		}
		return out, nil
	case *avro.MapSchema:
		m, ok := v.(map[string]any)
		if !ok && v != nil {
			return nil, fmt.Errorf("map decoded as %T", v)
		}
		out := make(map[string]any, len(m))
		for k, e := range m {
			j, err := avroJSON(s.Values(), e, false)
			if err != nil {
				return nil, fmt.Errorf("[%q]: %w", k, err)
			}
			out[k] = j
		}
		return out, nil
	case *avro.UnionSchema:
		return avroUnion(s, v, eface)
	case *avro.FixedSchema:
		return avroFixed(s, v)
	}
	return nil, fmt.Errorf("unsupported Avro schema %s", s.Type())
}

// resolvedUnionNames are the union branches hamba's default type resolver
// knows (avro.NewTypeResolver, hamba/avro v2.24.0): a union all of whose
// branches are among them decodes into an interface as the plain value;
// any other union as a map of its branch's name to the value.
var resolvedUnionNames = map[string]bool{
	"null": true, "int": true, "long": true, "float": true, "double": true, "string": true,
	"bytes": true, "boolean": true, "int.date": true, "int.time-millis": true,
	"long.timestamp-millis": true, "long.timestamp-micros": true, "long.time-micros": true,
	"bytes.decimal": true, "string.uuid": true,
}

// typeName is hamba's name of a union branch: a named type's full name,
// else the type and its logical type ("bytes.decimal").
func typeName(s avro.Schema) string {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		name += "." + string(l.Logical().Type())
	}
	return name
}

// unionWrapped reports whether hamba decodes union u wrapped as an
// array item or a map value.
func unionWrapped(u *avro.UnionSchema) bool {
	for _, t := range u.Types() {
		switch t.Type() {
		case avro.Array, avro.Map:
			return true // resolved as "array:items", never registered
		}
		if !resolvedUnionNames[typeName(t)] {
			return true
		}
	}
	return false
}

// avroUnion returns the plain value of u's branch.
func avroUnion(u *avro.UnionSchema, v any, eface bool) (any, error) {
	if isNil(v) {
		return nil, nil
	}
	if eface || unionWrapped(u) {
		m, ok := v.(map[string]any)
		if ok && len(m) == 0 {
			return nil, nil
		}
		if ok && len(m) == 1 {
			for name, inner := range m {
				for _, t := range u.Types() {
					if typeName(t) == name {
						// The branch's value went through the eface
						// decoder too.
						return avroJSON(t, inner, true)
					}
				}
			}
		}
		return nil, fmt.Errorf("union value %T names none of its branches", v)
	}
	for _, t := range u.Types() {
		if t.Type() != avro.Null && goMatches(t, v) {
			return avroJSON(t, v, false)
		}
	}
	return nil, fmt.Errorf("union value of type %T matches none of its branches", v)
}

// goMatches reports whether v has the Go type hamba decodes branch t
// into (a resolved union's value carries no branch index).
func goMatches(t avro.Schema, v any) bool {
	switch typeName(t) {
	case "int":
		_, ok := v.(int)
		return ok
	case "long":
		_, ok := v.(int64)
		return ok
	case "float":
		_, ok := v.(float32)
		return ok
	case "double":
		_, ok := v.(float64)
		return ok
	case "string", "string.uuid":
		_, ok := v.(string)
		return ok
	case "bytes":
		_, ok := v.([]byte)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "int.date", "long.timestamp-millis", "long.timestamp-micros":
		_, ok := v.(time.Time)
		return ok
	case "int.time-millis", "long.time-micros":
		_, ok := v.(time.Duration)
		return ok
	case "bytes.decimal":
		_, ok := v.(*big.Rat)
		return ok
	}
	return false
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map, reflect.Slice, reflect.Pointer, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

func avroPrimitive(s *avro.PrimitiveSchema, v any) (any, error) {
	var logical avro.LogicalType
	if l := s.Logical(); l != nil {
		logical = l.Type()
	}
	switch v := v.(type) {
	case nil:
		return nil, nil
	case bool:
		return v, nil
	case string:
		return v, nil
	case int:
		return json.Number(strconv.FormatInt(int64(v), 10)), nil
	case int32:
		return json.Number(strconv.FormatInt(int64(v), 10)), nil
	case int64:
		return json.Number(strconv.FormatInt(v, 10)), nil
	case float32:
		return floatJSON(float64(v), 32), nil
	case float64:
		return floatJSON(v, 64), nil
	case []byte:
		return base64.StdEncoding.EncodeToString(v), nil
	case *big.Rat:
		ds, ok := s.Logical().(*avro.DecimalLogicalSchema)
		if !ok {
			return nil, fmt.Errorf("a decimal without a decimal schema")
		}
		return decimalJSON(v, ds.Scale())
	case time.Time:
		if logical == avro.Date {
			return v.UTC().Format(time.DateOnly), nil
		}
		return v.UTC().Format(time.RFC3339Nano), nil
	case time.Duration:
		if logical == avro.TimeMillis {
			return json.Number(strconv.FormatInt(v.Milliseconds(), 10)), nil
		}
		return json.Number(strconv.FormatInt(v.Microseconds(), 10)), nil
	}
	return nil, fmt.Errorf("%s decoded as %T", s.Type(), v)
}

func avroFixed(s *avro.FixedSchema, v any) (any, error) {
	switch v := v.(type) {
	case *big.Rat:
		ds, ok := s.Logical().(*avro.DecimalLogicalSchema)
		if !ok {
			return nil, fmt.Errorf("fixed %s: a decimal without a decimal schema", s.FullName())
		}
		return decimalJSON(v, ds.Scale())
	case avro.LogicalDuration:
		return map[string]any{
			"months":       json.Number(strconv.FormatUint(uint64(v.Months), 10)),
			"days":         json.Number(strconv.FormatUint(uint64(v.Days), 10)),
			"milliseconds": json.Number(strconv.FormatUint(uint64(v.Milliseconds), 10)),
		}, nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8 {
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return base64.StdEncoding.EncodeToString(b), nil
	}
	if b, ok := v.([]byte); ok {
		return base64.StdEncoding.EncodeToString(b), nil
	}
	return nil, fmt.Errorf("fixed %s decoded as %T", s.FullName(), v)
}

// decimalJSON is r as an exact JSON number with scale digits after the
// point: an Avro decimal is unscaled/10^scale, so the text is exact.
func decimalJSON(r *big.Rat, scale int) (any, error) {
	if scale < 0 {
		return nil, fmt.Errorf("decimal with negative scale %d", scale)
	}
	return json.Number(r.FloatString(scale)), nil
}

// floatJSON is the shortest decimal that reads back as f at its bit size;
// JSON has no NaN or infinities, so those are strings.
func floatJSON(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, bits))
}
