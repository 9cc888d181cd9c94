package decode_test

import (
	"encoding/base64"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
)

const accountV1 = `{"type":"record","name":"Account","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"name","type":"string"}]}`

const accountV2 = `{"type":"record","name":"Account","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"name","type":"string"},
 {"name":"email","type":["null","string"],"default":null},
 {"name":"balance","type":{"type":"bytes","logicalType":"decimal","precision":30,"scale":2}},
 {"name":"reserve","type":{"type":"fixed","name":"Reserve","size":12,"logicalType":"decimal","precision":20,"scale":4}},
 {"name":"rate","type":"double"},
 {"name":"ratio","type":"float"},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"address","type":["null",{"type":"record","name":"Address","fields":[
   {"name":"city","type":"string"},
   {"name":"zip","type":["null","int"],"default":null}]}],"default":null},
 {"name":"choice","type":["null","string","long"],"default":null},
 {"name":"labels","type":["null",{"type":"map","values":"string"}],"default":null},
 {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["PERSONAL","BUSINESS"]}},
 {"name":"blob","type":"bytes"},
 {"name":"opened","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"born","type":{"type":"int","logicalType":"date"}},
 {"name":"limits","type":{"type":"map","values":["null","long"]}}]}`

type accountV1Go struct {
	ID   int64  `avro:"id"`
	Name string `avro:"name"`
}

type addressGo struct {
	City string `avro:"city"`
	Zip  *int   `avro:"zip"`
}

type accountV2Go struct {
	ID      int64              `avro:"id"`
	Name    string             `avro:"name"`
	Email   *string            `avro:"email"`
	Balance *big.Rat           `avro:"balance"`
	Reserve *big.Rat           `avro:"reserve"`
	Rate    float64            `avro:"rate"`
	Ratio   float32            `avro:"ratio"`
	Tags    []string           `avro:"tags"`
	Address *addressGo         `avro:"address"`
	Choice  any                `avro:"choice"`
	Labels  *map[string]string `avro:"labels"`
	Kind    string             `avro:"kind"`
	Blob    []byte             `avro:"blob"`
	Opened  time.Time          `avro:"opened"`
	Born    time.Time          `avro:"born"`
	Limits  map[string]any     `avro:"limits"`
}

func rat(t *testing.T, s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		t.Fatalf("bad rational %q", s)
	}
	return r
}

// TestAvroEvolution decodes a topic whose values use two versions of one
// Avro schema, each record with the version it was written with, and checks
// every value against JSON built here from the Go values encoded: exact
// longs beyond 2^53, exact decimals (bytes and fixed), plain unions
// (including a record, a map whose only key is a type name, and a
// three-branch union), bytes as base64, dates and timestamps.
func TestAvroEvolution(t *testing.T) {
	reg := newRegistry(t)
	topic := topicName(t)
	id1 := register(t, reg, topic+"-value", sr.TypeAvro, accountV1)
	id2 := register(t, reg, topic+"-value", sr.TypeAvro, accountV2)
	if id1 == id2 {
		t.Fatalf("both versions got schema id %d", id1)
	}
	s1, s2 := avro.MustParse(accountV1), avro.MustParse(accountV2)

	zip := 7050
	email := "b@example.com"
	labels := map[string]string{"string": "looks like a union wrapper"}
	opened := time.Date(2026, 11, 30, 8, 15, 42, 123_000_000, time.UTC)
	born := time.Date(1990, 2, 3, 0, 0, 0, 0, time.UTC)
	v2s := []accountV2Go{
		{ID: 9007199254740993, Name: "big", Email: &email, Balance: rat(t, "1234567890123456789012.34"),
			Reserve: rat(t, "-0.0001"), Rate: 0.1, Ratio: 1.5, Tags: []string{"a", "b"},
			Address: &addressGo{City: "Oslo", Zip: &zip}, Choice: "text", Labels: &labels, Kind: "BUSINESS",
			Blob: []byte{0, 1, 2, 0xff}, Opened: opened, Born: born, Limits: map[string]any{"day": int64(-5), "none": nil}},
		{ID: -9223372036854775808, Name: "min", Balance: rat(t, "12.30"), Reserve: rat(t, "3"),
			Rate: -2.5e-300, Ratio: 3.25, Tags: []string{}, Choice: int64(1) << 62, Kind: "PERSONAL",
			Blob: []byte{}, Opened: time.UnixMilli(0).UTC(), Born: time.Unix(0, 0).UTC(), Limits: map[string]any{}},
	}
	v1s := []accountV1Go{{ID: 1, Name: "old"}, {ID: 9223372036854775807, Name: "max"}}

	var batch []fold.Record
	var want []any
	for i, v := range v1s {
		b, err := avro.Marshal(s1, v)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, fold.Record{Partition: 0, Offset: int64(2 * i), Key: []byte("k1-" + strconv.Itoa(i)), Value: framed(t, id1, nil, b)})
		want = append(want, map[string]any{"id": num(strconv.FormatInt(v.ID, 10)), "name": v.Name})
	}
	for i, v := range v2s {
		b, err := avro.Marshal(s2, v)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, fold.Record{Partition: 1, Offset: int64(i), Key: []byte("k2-" + strconv.Itoa(i)), Value: framed(t, id2, nil, b)})
		want = append(want, wantV2(v))
	}

	d, err := decode.New(decode.Config{Topic: topic, Value: decode.Avro, Registry: decode.Registry{URL: reg.URL()}})
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
	for i, r := range out {
		if string(r.Key) != string(batch[i].Key) || r.Partition != batch[i].Partition || r.Offset != batch[i].Offset {
			t.Errorf("record %d: key/position changed: %q %d@%d", i, r.Key, r.Partition, r.Offset)
		}
		checkJSON(t, "record "+strconv.Itoa(i), r.Value, want[i])
	}
}

// wantV2 is the JSON the package doc promises for an accountV2Go value.
func wantV2(v accountV2Go) map[string]any {
	m := map[string]any{
		"id": num(strconv.FormatInt(v.ID, 10)), "name": v.Name,
		"email":   nil,
		"balance": num(v.Balance.FloatString(2)), "reserve": num(v.Reserve.FloatString(4)),
		"rate": num(strconv.FormatFloat(v.Rate, 'g', -1, 64)), "ratio": num(strconv.FormatFloat(float64(v.Ratio), 'g', -1, 32)),
		"address": nil, "choice": nil, "labels": nil, "kind": v.Kind,
		"blob":   base64.StdEncoding.EncodeToString(v.Blob),
		"opened": v.Opened.UTC().Format(time.RFC3339Nano),
		"born":   v.Born.Format("2006-01-02"),
	}
	if v.Email != nil {
		m["email"] = *v.Email
	}
	tags := []any{}
	for _, s := range v.Tags {
		tags = append(tags, s)
	}
	m["tags"] = tags
	if a := v.Address; a != nil {
		addr := map[string]any{"city": a.City, "zip": nil}
		if a.Zip != nil {
			addr["zip"] = num(strconv.Itoa(*a.Zip))
		}
		m["address"] = addr
	}
	switch c := v.Choice.(type) {
	case string:
		m["choice"] = c
	case int64:
		m["choice"] = num(strconv.FormatInt(c, 10))
	}
	if v.Labels != nil {
		l := map[string]any{}
		for k, s := range *v.Labels {
			l[k] = s
		}
		m["labels"] = l
	}
	lim := map[string]any{}
	for k, x := range v.Limits {
		if x == nil {
			lim[k] = nil
		} else {
			lim[k] = num(strconv.FormatInt(x.(int64), 10))
		}
	}
	m["limits"] = lim
	return m
}

// TestAvroKey decodes Avro keys: a string key is stored as its JSON text
// (quoted), and a null key stays null for the fold to skip.
func TestAvroKey(t *testing.T) {
	reg := newRegistry(t)
	topic := topicName(t)
	id := register(t, reg, topic+"-key", sr.TypeAvro, `"string"`)
	k, err := avro.Marshal(avro.MustParse(`"string"`), "acct-\"7\"")
	if err != nil {
		t.Fatal(err)
	}
	d, err := decode.New(decode.Config{Topic: topic, Key: decode.Avro, Registry: decode.Registry{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := d.Decode([]fold.Record{
		{Offset: 0, Key: framed(t, id, nil, k), Value: []byte("raw value")},
		{Offset: 1, Key: nil, Value: []byte("orphan")},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, "key", out[0].Key, "acct-\"7\"")
	if string(out[0].Value) != "raw value" {
		t.Errorf("value %q: a raw value must stay as it is", out[0].Value)
	}
	if out[1].Key != nil || string(out[1].Value) != "orphan" {
		t.Errorf("null-key record changed: %q %q", out[1].Key, out[1].Value)
	}
}
