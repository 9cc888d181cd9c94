package decode_test

import (
	"strings"
	"testing"

	"github.com/jhump/protoreflect/desc/protoparse"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
)

// orderV1 and orderV2 are two versions of one schema: v2 adds a field. No
// Go types are generated for them, here or in the decoder.
const orderV1 = `syntax = "proto3";
package shop;
message Order {
  string id = 1;
  int64 total_cents = 2;
  Customer customer = 3;
  repeated Line lines = 4;
  Status status = 5;
  bytes blob = 6;
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
  enum Status {
    NEW = 0;
    PAID = 1;
  }
}
message Customer {
  string name = 1;
  Address address = 2;
  message Address {
    string city = 1;
  }
}
`

var orderV2 = strings.Replace(orderV1, "  bytes blob = 6;\n", "  bytes blob = 6;\n  string note = 7;\n", 1)

// message parses text (independently of the decoder) and returns the
// message type at the index path.
func message(t *testing.T, text string, path ...int) protoreflect.MessageDescriptor {
	t.Helper()
	p := protoparse.Parser{Accessor: protoparse.FileContentsFromMap(map[string]string{"o.proto": text})}
	fds, err := p.ParseFiles("o.proto")
	if err != nil {
		t.Fatal(err)
	}
	msgs := fds[0].UnwrapFile().Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range path {
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	return md
}

// protoBytes encodes the message described by jsonText (protojson input).
func protoBytes(t *testing.T, md protoreflect.MessageDescriptor, jsonText string) []byte {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal([]byte(jsonText), m); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProtobufNestedEvolving decodes Protobuf values of two schema
// versions and three message types (a top-level one, a second top-level
// one and a nested one, by message index) without generated types, plus a
// tombstone, and checks each against the JSON mapping written out here.
func TestProtobufNestedEvolving(t *testing.T) {
	reg := newRegistry(t)
	topic := topicName(t)
	id1 := register(t, reg, topic+"-value", sr.TypeProtobuf, orderV1)
	id2 := register(t, reg, topic+"-value", sr.TypeProtobuf, orderV2)

	o1 := protoBytes(t, message(t, orderV1, 0), `{"id":"o-1","total_cents":"9007199254740993",
		"customer":{"name":"Ada","address":{"city":"Oslo"}},
		"lines":[{"sku":"s1","qty":2},{"sku":"s2"}],"status":"PAID","blob":"AAH/"}`)
	o2 := protoBytes(t, message(t, orderV2, 0), `{"id":"o-2","note":"v2 field"}`)
	cust := protoBytes(t, message(t, orderV1, 1), `{"name":"Bob"}`)
	line := protoBytes(t, message(t, orderV2, 0, 0), `{"sku":"s9","qty":-3}`)

	batch := []fold.Record{
		{Partition: 0, Offset: 0, Key: []byte("a"), Value: framed(t, id1, []int{0}, o1)},
		{Partition: 0, Offset: 1, Key: []byte("b"), Value: framed(t, id2, []int{0}, o2)},
		{Partition: 0, Offset: 2, Key: []byte("c"), Value: framed(t, id1, []int{1}, cust)},
		{Partition: 0, Offset: 3, Key: []byte("d"), Value: framed(t, id2, []int{0, 0}, line)},
		{Partition: 0, Offset: 4, Key: []byte("a"), Value: nil}, // tombstone: the serde would panic
	}
	want := []any{
		map[string]any{"id": "o-1", "total_cents": "9007199254740993",
			"customer": map[string]any{"name": "Ada", "address": map[string]any{"city": "Oslo"}},
			"lines":    []any{map[string]any{"sku": "s1", "qty": num("2")}, map[string]any{"sku": "s2", "qty": num("0")}},
			"status":   "PAID", "blob": "AAH/"},
		map[string]any{"id": "o-2", "total_cents": "0", "customer": nil, "lines": []any{}, "status": "NEW", "blob": "", "note": "v2 field"},
		map[string]any{"name": "Bob", "address": nil},
		map[string]any{"sku": "s9", "qty": num("-3")},
	}

	d, err := decode.New(decode.Config{Topic: topic, Value: decode.Protobuf, Registry: decode.Registry{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := d.Decode(batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(batch) {
		t.Fatalf("%d records out of %d", len(out), len(batch))
	}
	for i, w := range want {
		checkJSON(t, "record "+string(batch[i].Key), out[i].Value, w)
	}
	if out[4].Value != nil {
		t.Errorf("tombstone decoded to %q, want null", out[4].Value)
	}
}

// TestProtobufWellKnownImport: a schema importing a well-known type (which
// the registry does not hold) decodes, the Timestamp in its JSON form.
func TestProtobufWellKnownImport(t *testing.T) {
	const text = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Event {
  string id = 1;
  google.protobuf.Timestamp at = 2;
}
`
	reg := newRegistry(t)
	topic := topicName(t)
	id := register(t, reg, topic+"-value", sr.TypeProtobuf, text)
	body := protoBytes(t, message(t, text, 0), `{"id":"e1","at":"2026-12-01T10:00:00.5Z"}`)
	d, err := decode.New(decode.Config{Topic: topic, Value: decode.Protobuf, Registry: decode.Registry{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := d.Decode([]fold.Record{{Key: []byte("k"), Value: framed(t, id, []int{0}, body)}})
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, "event", out[0].Value, map[string]any{"id": "e1", "at": "2026-12-01T10:00:00.500Z"})
}
