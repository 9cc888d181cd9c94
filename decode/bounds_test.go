package decode_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
)

// The schemas of the bounds tests: recursive ones (a chain of nodes nests
// as deep as its length), and a record of every kind of length and count.
const (
	protoNode = `syntax = "proto3";
message Node {
  Node child = 1;
  map<string, Node> kids = 2;
}
`
	avroNode  = `{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}`
	avroKinds = `{"type":"record","name":"Kinds","fields":[
  {"name":"s","type":"string"},
  {"name":"b","type":"bytes"},
  {"name":"empties","type":{"type":"array","items":{"type":"record","name":"Empty","fields":[]}}},
  {"name":"m","type":{"type":"map","values":"int"}},
  {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
  {"name":"u","type":["null","long"]}
]}`
)

// zz is Avro's (and Protobuf's sint) zigzag varint of each n, concatenated.
func zz(ns ...int64) []byte {
	var b []byte
	for _, n := range ns {
		b = binary.AppendVarint(b, n)
	}
	return b
}

// protoChain is a Node nested n levels deep (the top message is level 1),
// and the JSON the decoder must make of it.
func protoChain(n int) ([]byte, any) {
	var body []byte
	var want any = nil
	for i := 1; i < n; i++ {
		want = map[string]any{"child": want, "kids": map[string]any{}}
		body = append(append([]byte{0x0a}, binary.AppendUvarint(nil, uint64(len(body)))...), body...)
	}
	return body, map[string]any{"child": want, "kids": map[string]any{}}
}

// avroChain is a Node nested n levels deep, and its JSON.
func avroChain(n int) ([]byte, any) {
	body := append(bytes.Repeat([]byte{0x02}, n-1), 0x00)
	var want any = map[string]any{"next": nil}
	for i := 1; i < n; i++ {
		want = map[string]any{"next": want}
	}
	return body, want
}

// jsonChain is n arrays nested in each other around a string of brackets
// (which are not levels), and its value.
func jsonChain(n int) ([]byte, any) {
	var want any = "[[{{"
	for i := 0; i < n; i++ {
		want = []any{want}
	}
	return []byte(strings.Repeat("[", n) + `"[[{{"` + strings.Repeat("]", n)), want
}

// TestBounds: every length, count and nesting that a record's bytes give
// is checked against the bytes that remain before a library sees them;
// each value here is refused as a bad record (a *fold.DataError at its
// position, or skipped and counted), and the good value beside it, at the
// bound itself, decodes to what an independent reading of it says. The
// first case is the value FuzzDecodeValue found: a Protobuf frame whose
// message-index count is a varint of 2^39, with which confluent's serde
// allocated 2^39 ints (4 TiB) and the process died out of memory.
func TestBounds(t *testing.T) {
	reg := newRegistry(t)
	topic := topicName(t)
	// The found value names schema id 1: register the Protobuf schema
	// first, so that the id is known and only the frame is at fault.
	protoID := register(t, reg, topic+"-proto", sr.TypeProtobuf, protoNode)
	if protoID != 1 {
		t.Fatalf("first schema has id %d, want 1", protoID)
	}
	nodeID := register(t, reg, topic+"-node", sr.TypeAvro, avroNode)
	kindsID := register(t, reg, topic+"-kinds", sr.TypeAvro, avroKinds)
	jsID := register(t, reg, topic+"-json", sr.TypeJSON, `{"type":"array"}`)
	found, err := hex.DecodeString("00000000018080808080200873" + "65")
	if err != nil {
		t.Fatal(err)
	}

	protoOK, protoWant := protoChain(decode.MaxDepth)
	protoDeep, _ := protoChain(decode.MaxDepth + 1)
	avroOK, avroWant := avroChain(decode.MaxDepth)
	avroDeep, _ := avroChain(decode.MaxDepth + 1)
	jsonOK, jsonWant := jsonChain(decode.MaxJSONDepth)
	jsonDeep, _ := jsonChain(decode.MaxJSONDepth + 1)
	// A good Kinds value: s "hi", b "\x01", three empty records (items
	// that take no bytes), {"k": 7}, B, 9.
	kinds := func(s, b, nulls, m, e, u []byte) []byte {
		return bytes.Join([][]byte{s, b, nulls, m, e, u}, nil)
	}
	kS, kB, kNulls, kM, kE, kU := append(zz(2), "hi"...), append(zz(1), 1), zz(3, 0), append(append(zz(1, 1), 'k'), zz(7, 0)...), zz(1), zz(1, 9)
	kindsOK := kinds(kS, kB, kNulls, kM, kE, kU)
	kindsWant := map[string]any{"s": "hi", "b": "AQ==", "empties": []any{map[string]any{}, map[string]any{}, map[string]any{}}, "m": map[string]any{"k": num("7")}, "e": "B", "u": num("9")}

	cases := []struct {
		name   string
		format decode.Format
		good   []byte // at the bound: decodes
		want   any    // its JSON
		bad    []byte // beyond it: refused
		reason string // in the bad one's message
	}{
		{"protobuf: message-index count 2^42 (found by FuzzDecodeValue)", decode.Protobuf,
			framed(t, protoID, []int{0}, protoOK), protoWant, found, "message-index count 549755813888 exceeds the 3 bytes that remain"},
		{"protobuf: message-index count above the remaining bytes", decode.Protobuf,
			framed(t, protoID, []int{0}, protoOK), protoWant, append([]byte{0, 0, 0, 0, 1}, zz(5, 0, 0)...), "message-index count 5 exceeds the 2 bytes that remain"},
		{"protobuf: negative message-index count", decode.Protobuf,
			framed(t, protoID, []int{0}, protoOK), protoWant, append([]byte{0, 0, 0, 0, 1}, zz(-1)...), "is negative"},
		{"protobuf: message-index count not a varint", decode.Protobuf,
			framed(t, protoID, []int{0}, protoOK), protoWant, []byte{0, 0, 0, 0, 1, 0x80, 0x80}, "not a varint"},
		{"protobuf: message-index path deeper than MaxDepth", decode.Protobuf,
			framed(t, protoID, []int{0}, protoOK), protoWant, append([]byte{0, 0, 0, 0, 1}, append(zz(decode.MaxDepth+1), make([]byte, decode.MaxDepth+1)...)...), "nested deeper than 64 levels"},
		{"protobuf: message index beyond int32", decode.Protobuf,
			framed(t, protoID, []int{0}, protoOK), protoWant, append([]byte{0, 0, 0, 0, 1}, zz(1, 1<<40)...), "out of range"},
		{"protobuf: messages nested deeper than MaxDepth", decode.Protobuf,
			framed(t, protoID, []int{0}, protoOK), protoWant, framed(t, protoID, []int{0}, protoDeep), "nested deeper than 64 levels"},
		{"protobuf: a field length beyond the bytes", decode.Protobuf,
			framed(t, protoID, []int{0}, protoOK), protoWant, framed(t, protoID, []int{0}, []byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x08}), "field 1"},
		{"avro: records nested deeper than MaxDepth", decode.Avro,
			framed(t, nodeID, nil, avroOK), avroWant, framed(t, nodeID, nil, avroDeep), "nested deeper than 64 levels"},
		{"avro: string length beyond the bytes", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, kinds(zz(1<<40), kB, kNulls, kM, kE, kU)), "string at byte 0: length 1099511627776 exceeds the"},
		{"avro: negative bytes length", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, kinds(kS, zz(-3), kNulls, kM, kE, kU)), "negative length -3"},
		{"avro: array of empty records with a block count of 2^40", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, kinds(kS, kB, zz(1<<40, 0), kM, kE, kU)), "array block count 1099511627776"},
		{"avro: negative array block count of 2^40 (with a size)", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, kinds(kS, kB, zz(-(1<<40), 0, 0), kM, kE, kU)), "array block count"},
		{"avro: map block count beyond the bytes", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, kinds(kS, kB, kNulls, zz(1<<50), kE, kU)), "map block count"},
		{"avro: map key length beyond the bytes", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, kinds(kS, kB, kNulls, zz(1, 1<<30), kE, kU)), "map key at byte"},
		{"avro: enum index out of range", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, kinds(kS, kB, kNulls, kM, zz(2), kU)), "enum E index 2"},
		{"avro: union index out of range", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, kinds(kS, kB, kNulls, kM, kE, zz(-1))), "union index -1"},
		{"avro: varint longer than a long", decode.Avro,
			framed(t, kindsID, nil, kindsOK), kindsWant, framed(t, kindsID, nil, append(bytes.Repeat([]byte{0x80}, 10), 1)), "varint longer than 10 bytes"},
		{"json: arrays nested deeper than MaxJSONDepth", decode.JSON,
			jsonOK, jsonWant, jsonDeep, "nested deeper than 10000 levels"},
		{"jsonschema: arrays nested deeper than MaxJSONDepth", decode.JSONSchema,
			framed(t, jsID, nil, jsonOK), jsonWant, framed(t, jsID, nil, jsonDeep), "nested deeper than 10000 levels"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			goodRec := fold.Record{Partition: 4, Offset: 1, Key: []byte("good"), Value: c.good}
			badRec := fold.Record{Partition: 5, Offset: int64(100 + i), Key: []byte("bad"), Value: c.bad}
			conf := decode.Config{Topic: topic, Value: c.format, Registry: decode.Registry{URL: reg.URL()}}
			d, err := decode.New(conf)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			out, err := d.Decode([]fold.Record{goodRec})
			if err != nil {
				t.Fatalf("the good value at the bound: %v", err)
			}
			checkJSON(t, "good", out[0].Value, c.want)

			_, err = d.Decode([]fold.Record{goodRec, badRec})
			var de *fold.DataError
			if !errors.As(err, &de) || !errors.Is(err, fold.ErrInvalidData) {
				t.Fatalf("err %v (%T), want a *fold.DataError", err, err)
			}
			if de.Topic != topic || de.Partition != 5 || de.Offset != badRec.Offset || de.Kind != fold.ReasonUndecodable {
				t.Errorf("DataError %+v: want %s/5@%d, kind %s", de, topic, badRec.Offset, fold.ReasonUndecodable)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("message %q: want %q", err, c.reason)
			}

			conf.OnBadRecord = fold.SkipBadRecords
			skip, err := decode.New(conf)
			if err != nil {
				t.Fatal(err)
			}
			defer skip.Close()
			out, err = skip.Decode([]fold.Record{badRec, goodRec, badRec})
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 1 || string(out[0].Key) != "good" || skip.Skipped() != 2 {
				t.Fatalf("skip: %d records out (want the good one), %d skipped (want 2)", len(out), skip.Skipped())
			}
			checkJSON(t, "good after skips", out[0].Value, c.want)
		})
	}
}
