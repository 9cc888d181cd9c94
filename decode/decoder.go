package decode

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/rest"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/avrov2"
	"github.com/google/uuid"

	"github.com/kmaterialize/kmaterialize/fold"
)

// Config says how to decode one topic's records.
type Config struct {
	// Topic is the records' topic, for messages (the registry lookups go
	// by schema id, whatever subject naming strategy the producers use).
	Topic string
	// Key and Value are the formats; "" is Raw.
	Key, Value Format
	// Registry is required when Key or Value is Avro, Protobuf or
	// JSONSchema.
	Registry Registry
	// OnBadRecord says what an undecodable record does: fail the run (the
	// default) or be left out and counted.
	OnBadRecord fold.OnBadRecord
}

// Active reports whether c decodes anything (a format other than Raw).
func (c Config) Active() bool { return c.Key.orRaw() != Raw || c.Value.orRaw() != Raw }

// Check reports a setting that cannot work as a *SettingError: an unknown
// format, a registry format without a registry URL, or registry settings
// that cannot work (Registry.Check).
func (c Config) Check() error {
	for _, f := range []struct {
		what string
		f    Format
	}{{"key format", c.Key}, {"value format", c.Value}} {
		if !f.f.Valid() {
			return &SettingError{Msg: fmt.Sprintf("%s %q: want %s", f.what, string(f.f), FormatNames)}
		}
		if f.f.NeedsRegistry() && c.Registry.URL == "" {
			return &SettingError{Msg: fmt.Sprintf("%s %s needs a schema registry URL (--schema-registry, %s, or schema_registry.url in the config file)", f.what, f.f, EnvURL)}
		}
	}
	// A registry nobody uses is not checked: a stray environment variable
	// must not fail a raw table.
	if !c.Key.NeedsRegistry() && !c.Value.NeedsRegistry() {
		return nil
	}
	return c.Registry.Check()
}

// Decoder decodes batches of one topic's records. It is not safe for
// concurrent use: one replay's sink calls it.
type Decoder struct {
	topic   string
	key     *codec // nil: raw
	value   *codec // nil: raw
	on      fold.OnBadRecord
	skipped int64

	reg     Registry
	client  schemaregistry.Client // nil without a registry format
	schemas map[schemaKey]*schema // by schema id (or GUID), for the life of the Decoder
}

// New returns a Decoder for c, after Check. It makes no request: the
// registry is first asked for a schema by the first record that needs it.
func New(c Config) (*Decoder, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	d := &Decoder{topic: c.Topic, on: c.OnBadRecord, reg: c.Registry, schemas: map[schemaKey]*schema{}}
	if c.Key.NeedsRegistry() || c.Value.NeedsRegistry() {
		cl, err := c.Registry.client()
		if err != nil {
			return nil, err
		}
		d.client = cl
	}
	var err error
	if d.key, err = d.newCodec(c.Key.orRaw(), serde.KeySerde); err != nil {
		return nil, err
	}
	if d.value, err = d.newCodec(c.Value.orRaw(), serde.ValueSerde); err != nil {
		return nil, err
	}
	return d, nil
}

// Close releases the registry client.
func (d *Decoder) Close() error {
	if d.client == nil {
		return nil
	}
	return d.client.Close()
}

// Skipped is the number of undecodable records left out (with
// fold.SkipBadRecords), all of kind fold.ReasonUndecodable.
func (d *Decoder) Skipped() int64 { return d.skipped }

// Decode returns batch with keys and values decoded, leaving out the
// records skipped as bad. The records of batch are not changed; the
// result's decoded bytes are fresh, and undecoded ones shared with batch.
// An error is a *fold.DataError (a bad record, with fold.FailOnBadRecord)
// or a *RegistryError; the batch is then abandoned.
func (d *Decoder) Decode(batch []fold.Record) ([]fold.Record, error) {
	out := make([]fold.Record, 0, len(batch))
	for _, r := range batch {
		nr, err := d.record(r)
		var bad *badData
		if errors.As(err, &bad) {
			de := &fold.DataError{Topic: d.topic, Partition: r.Partition, Offset: r.Offset,
				Kind: fold.ReasonUndecodable, Reason: bad.reason, Err: bad.err}
			if d.on != fold.SkipBadRecords {
				return nil, de
			}
			d.skipped++
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, nr)
	}
	return out, nil
}

// record decodes one record's key and value.
func (d *Decoder) record(r fold.Record) (fold.Record, error) {
	where := fold.Position{Partition: r.Partition, Offset: r.Offset}
	// A null or empty key is left to the fold (skipped there, by reason).
	if d.key != nil && len(r.Key) > 0 {
		k, err := d.key.decode(d, r.Key, where)
		if err != nil {
			return r, prefix("key", err)
		}
		r.Key = k
	}
	// A tombstone stays a tombstone: no deserializer sees it (the
	// Protobuf one panics on nil).
	if d.value != nil && r.Value != nil {
		v, err := d.value.decode(d, r.Value, where)
		if err != nil {
			return r, prefix("value", err)
		}
		r.Value = v
	}
	return r, nil
}

// badData is why one record cannot be decoded (it becomes a DataError).
type badData struct {
	reason string
	err    error
}

func (b *badData) Error() string {
	if b.err == nil {
		return b.reason
	}
	return b.reason + ": " + b.err.Error()
}

func badf(err error, format string, args ...any) *badData {
	return &badData{reason: fmt.Sprintf(format, args...), err: err}
}

// prefix names the part ("key", "value") in a bad record's reason.
func prefix(part string, err error) error {
	var b *badData
	if errors.As(err, &b) {
		return &badData{reason: part + ": " + b.reason, err: b.err}
	}
	return err
}

// schemaKey is a schema id, or a GUID (magic byte 1).
type schemaKey struct {
	id   int
	guid uuid.UUID
}

func (k schemaKey) String() string {
	if k.guid != uuid.Nil {
		return "schema guid " + k.guid.String()
	}
	return fmt.Sprintf("schema id %d", k.id)
}

// schema is one schema as fetched, with what was built from it.
type schema struct {
	info     schemaregistry.SchemaInfo
	notFound error // the registry's answer when it does not know the id
	built    any   // per format: avro.Schema, *protoTypes
}

// frame reads a payload's Schema Registry frame (magic byte and schema
// id, and for Protobuf the message indexes, checked first: protoIndexes)
// without the serde's own reader, which panics on short input. It returns
// the frame's length.
func frame(b []byte, schemaType string) (serde.SchemaID, int, error) {
	sid := serde.SchemaID{SchemaType: schemaType}
	switch {
	case len(b) == 0:
		return sid, 0, badf(nil, "empty, not a Schema Registry frame")
	case b[0] == serde.MagicByteV0 && len(b) < 5:
		return sid, 0, badf(nil, "truncated: %d bytes, a Schema Registry frame takes 5", len(b))
	case b[0] == serde.MagicByteV1 && len(b) < 17:
		return sid, 0, badf(nil, "truncated: %d bytes, a Schema Registry frame with a GUID takes 17", len(b))
	case b[0] != serde.MagicByteV0 && b[0] != serde.MagicByteV1:
		return sid, 0, badf(nil, "magic byte 0x%02x: not a Schema Registry frame (want 0x00)", b[0])
	}
	// The message indexes are checked before the serde reads them: it
	// allocates as many ints as the count says.
	if schemaType == "PROTOBUF" {
		at := 5
		if b[0] == serde.MagicByteV1 {
			at = 17
		}
		if err := protoIndexes(b[at:]); err != nil {
			return sid, 0, badf(err, "bad Schema Registry frame")
		}
	}
	var n int
	err := safely(func() error {
		var err error
		n, err = sid.FromBytes(b)
		return err
	})
	if err != nil {
		return sid, 0, badf(err, "bad Schema Registry frame")
	}
	return sid, n, nil
}

// safely runs f, turning a panic into an error: the serdes index into
// payloads and descriptors without bounds checks, and a bad record must
// not crash the process.
func safely(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("deserializer panicked: %v", p)
		}
	}()
	return f()
}

// schemaOf returns the schema of sid, from the cache or the registry.
// A schema the registry does not know is a bad record (and remembered, so
// that skipping many such records asks once); any other failure a
// *RegistryError.
func (d *Decoder) schemaOf(sid serde.SchemaID, where fold.Position) (*schema, error) {
	k := schemaKey{id: sid.ID, guid: sid.GUID}
	s, ok := d.schemas[k]
	if !ok {
		var info schemaregistry.SchemaInfo
		var err error
		// The subject "" asks for the id alone, whatever subject the
		// producer registered it under; the serdes ask the same (see
		// noSubject), so they find it in the client's cache.
		if k.guid != uuid.Nil {
			info, err = d.client.GetByGUID(k.guid.String())
		} else {
			info, err = d.client.GetBySubjectAndID("", k.id)
		}
		s = &schema{info: info}
		if err != nil {
			var re *rest.Error
			if !errors.As(err, &re) || !notFound(re) {
				// Anything but "not found" (a refused connection, a
				// response that is not the registry's JSON) is the
				// registry's failure, not the record's.
				return nil, &RegistryError{URL: displayURL(d.reg.URL), What: k.String(),
					Where: d.where(where), Msg: scrub(err.Error(), d.reg.secrets()), Err: err}
			}
			s.notFound = err
		}
		d.schemas[k] = s
	}
	if s.notFound != nil {
		return nil, badf(s.notFound, "unknown %s (the registry does not have it)", k)
	}
	return s, nil
}

// framedSchema reads the frame of a payload in the registry's schemaType
// ("AVRO", "PROTOBUF", "JSON"; name says it in errors) and returns the
// frame's schema id and the schema, refusing a schema of another type (the
// registry leaves an Avro schema's type empty).
func (d *Decoder) framedSchema(b []byte, schemaType, name string, where fold.Position) (framed, error) {
	sid, n, err := frame(b, schemaType)
	if err != nil {
		return framed{sid: sid}, err
	}
	f := framed{sid: sid, key: schemaKey{id: sid.ID, guid: sid.GUID}, body: b[n:]}
	s, err := d.schemaOf(sid, where)
	if err != nil {
		return f, err
	}
	t := s.info.SchemaType
	if t == "" {
		t = avrov2.SchemaType
	}
	if t != schemaType {
		return f, badf(nil, "%s is a %s schema, not %s", f.key, t, name)
	}
	f.schema = s
	return f, nil
}

// framed is a payload's frame as read, and its schema.
type framed struct {
	sid    serde.SchemaID
	key    schemaKey
	schema *schema
	body   []byte // the bytes after the frame
}

func (d *Decoder) where(p fold.Position) string {
	if d.topic == "" {
		return p.String()
	}
	return d.topic + "/" + p.String()
}

// noSubject makes the serdes look schemas up by id alone.
func noSubject(string, serde.Type, schemaregistry.SchemaInfo) (string, error) { return "", nil }

// registryFailure returns err as a *RegistryError when it is a failure to
// reach the registry (a network error, or an answer other than "not
// found"), and nil otherwise: a schema the registry does not know is the
// record's fault, a registry that does not answer is not.
func (d *Decoder) registryFailure(err error, what string, where fold.Position) error {
	var re *rest.Error
	isRest := errors.As(err, &re)
	if isRest && notFound(re) {
		return nil
	}
	if isRest || errors.As(err, new(*url.Error)) {
		return &RegistryError{URL: displayURL(d.reg.URL), What: what, Where: d.where(where),
			Msg: scrub(err.Error(), d.reg.secrets()), Err: err}
	}
	return nil
}

// notFound reports whether the registry answered "not found" (error codes
// 404 and 404xx: subject, version or schema not found).
func notFound(re *rest.Error) bool { return re.Code == 404 || re.Code/100 == 404 }
