package decode_test

import (
	"errors"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
)

// FuzzDecodeValue: whatever the bytes, decoding never panics (the serdes
// index into payloads without bounds checks) and either yields canonical
// JSON or a bad record (*fold.DataError) naming the record's position;
// with the registry up, it is never a registry failure. The seeds (run by
// go test) are a good record of each format, its truncations and garbage.
func FuzzDecodeValue(f *testing.F) {
	reg := srfake.New()
	defer reg.Close()
	avroID, _, err := reg.RegisterSchema("fuzz-value", sr.Schema{Schema: accountV1, Type: sr.TypeAvro})
	if err != nil {
		f.Fatal(err)
	}
	protoID, _, err := reg.RegisterSchema("fuzz-proto-value", sr.Schema{Schema: orderV1, Type: sr.TypeProtobuf})
	if err != nil {
		f.Fatal(err)
	}
	body, err := avro.Marshal(avro.MustParse(accountV1), accountV1Go{ID: 1 << 60, Name: "seed"})
	if err != nil {
		f.Fatal(err)
	}
	var h sr.ConfluentHeader
	good, _ := h.AppendEncode(nil, avroID, nil)
	good = append(good, body...)
	protoGood, _ := h.AppendEncode(nil, protoID, []int{0, 0})
	protoGood = append(protoGood, 0x0a, 0x02, 's', '1', 0x10, 0x05)
	for _, seed := range [][]byte{good, protoGood, {0}, {0, 0, 0, 0}, {1, 2}, {0xff}, []byte(`{"a":1}`)} {
		for i := 0; i <= len(seed); i++ {
			f.Add(uint8(i%3), seed[:i])
		}
	}
	formats := []decode.Format{decode.Avro, decode.Protobuf, decode.JSONSchema}
	f.Fuzz(func(t *testing.T, which uint8, value []byte) {
		d, err := decode.New(decode.Config{Topic: "fuzz", Value: formats[int(which)%len(formats)], Registry: decode.Registry{URL: reg.URL()}})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		out, err := d.Decode([]fold.Record{{Partition: 1, Offset: 2, Key: []byte("k"), Value: value}})
		if err != nil {
			var de *fold.DataError
			if !errors.As(err, &de) || de.Partition != 1 || de.Offset != 2 || de.Kind != fold.ReasonUndecodable {
				t.Fatalf("err %v (%T): want a bad record at 1@2", err, err)
			}
			return
		}
		if _, err := fold.CanonicalJSON(out[0].Value); err != nil {
			t.Fatalf("decoded %q is not JSON: %v", out[0].Value, err)
		}
		if c, _ := fold.CanonicalJSON(out[0].Value); string(c) != string(out[0].Value) {
			t.Fatalf("decoded %q is not canonical (%q)", out[0].Value, c)
		}
	})
}
