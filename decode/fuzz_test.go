package decode_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
)

// fuzzSchemas are registered in this order, so the fuzzer reaches each
// by a small schema id (1, 2, ...): flat and recursive schemas of each
// format.
var fuzzSchemas = []sr.Schema{
	{Schema: accountV1, Type: sr.TypeAvro},
	{Schema: orderV1, Type: sr.TypeProtobuf},
	{Schema: avroNode, Type: sr.TypeAvro},
	{Schema: protoNode, Type: sr.TypeProtobuf},
	{Schema: avroKinds, Type: sr.TypeAvro},
	{Schema: accountV2, Type: sr.TypeAvro},
	{Schema: `{"type":"object"}`, Type: sr.TypeJSON},
}

// FuzzDecodeValue: whatever the bytes, decoding never crashes the process
// (no panic, no allocation beyond the record's bounds: an out of memory
// is fatal, see bounds.go) and either yields canonical JSON or a bad
// record (*fold.DataError of kind undecodable) naming the record's
// position; with the registry up, it is never a registry failure. The
// seeds (run by go test) are a good record of each format, their
// truncations and garbage; testdata/fuzz/FuzzDecodeValue holds every
// input that ever failed.
func FuzzDecodeValue(f *testing.F) {
	reg := srfake.New()
	defer reg.Close()
	ids := make([]int, len(fuzzSchemas))
	for i, s := range fuzzSchemas {
		id, _, err := reg.RegisterSchema("fuzz-"+string(rune('a'+i)), s)
		if err != nil {
			f.Fatal(err)
		}
		ids[i] = id
	}
	body, err := avro.Marshal(avro.MustParse(accountV1), accountV1Go{ID: 1 << 60, Name: "seed"})
	if err != nil {
		f.Fatal(err)
	}
	var h sr.ConfluentHeader
	frame := func(id int, index []int, body []byte) []byte {
		b, err := h.AppendEncode(nil, id, index)
		if err != nil {
			f.Fatal(err)
		}
		return append(b, body...)
	}
	protoChainBody, _ := protoChain(5)
	avroChainBody, _ := avroChain(5)
	seeds := [][]byte{
		frame(ids[0], nil, body),
		frame(ids[1], []int{0, 0}, []byte{0x0a, 0x02, 's', '1', 0x10, 0x05}),
		frame(ids[2], nil, avroChainBody),
		frame(ids[3], []int{0}, protoChainBody),
		frame(ids[4], nil, append(append(zz(2), "hi"...), zz(1, 1, 3, 0, 1, 1)...)),
		frame(ids[6], nil, []byte(`{"a":[1,{"b":null}]}`)),
		{0}, {0, 0, 0, 0}, {1, 2}, {0xff}, []byte(`{"a":1}`), []byte(`[[[["x"]]]]`),
	}
	for _, seed := range seeds {
		for i := 0; i <= len(seed); i++ {
			for which := uint8(0); which < 4; which++ {
				f.Add(which, bytes.Clone(seed[:i]))
			}
		}
	}
	// One decoder per format for the whole run, as a replay has: a new
	// registry client per input leaks connections until the fuzzer's
	// worker hangs.
	formats := []decode.Format{decode.Avro, decode.Protobuf, decode.JSONSchema, decode.JSON}
	decoders := make([]*decode.Decoder, len(formats))
	for i, format := range formats {
		d, err := decode.New(decode.Config{Topic: "fuzz", Value: format, Registry: decode.Registry{URL: reg.URL()}})
		if err != nil {
			f.Fatal(err)
		}
		defer d.Close()
		decoders[i] = d
	}
	f.Fuzz(func(t *testing.T, which uint8, value []byte) {
		d := decoders[int(which)%len(decoders)]
		out, err := d.Decode([]fold.Record{{Partition: 1, Offset: 2, Key: []byte("k"), Value: value}})
		if err != nil {
			var de *fold.DataError
			if !errors.As(err, &de) || de.Topic != "fuzz" || de.Partition != 1 || de.Offset != 2 || de.Kind != fold.ReasonUndecodable {
				t.Fatalf("err %v (%T): want a bad record at fuzz/1@2", err, err)
			}
			return
		}
		if len(out) != 1 {
			t.Fatalf("%d records out of 1, and no error", len(out))
		}
		c, err := fold.CanonicalJSON(out[0].Value)
		if err != nil {
			t.Fatalf("decoded %q is not JSON: %v", out[0].Value, err)
		}
		if !bytes.Equal(c, out[0].Value) {
			t.Fatalf("decoded %q is not canonical (%q)", out[0].Value, c)
		}
	})
}
