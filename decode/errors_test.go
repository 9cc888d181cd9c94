package decode_test

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/fold"
)

// TestJSONSchema decodes JSON Schema framed values: the JSON text with
// every digit of its numbers, canonicalized.
func TestJSONSchema(t *testing.T) {
	reg := newRegistry(t)
	topic := topicName(t)
	id := register(t, reg, topic+"-value", sr.TypeJSON, `{"type":"object","properties":{"n":{"type":"number"}}}`)
	body := `{ "n": 12345678901234567890.123456789, "b": {"z": 1, "a": [1, 2.50, "x"]}, "t": true, "u": null }`
	d, err := decode.New(decode.Config{Topic: topic, Value: decode.JSONSchema, Registry: decode.Registry{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := d.Decode([]fold.Record{{Key: []byte("k"), Value: framed(t, id, nil, []byte(body))}, {Key: []byte("k"), Value: nil}})
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, "value", out[0].Value, map[string]any{
		"n": num("12345678901234567890.123456789"),
		"b": map[string]any{"z": num("1"), "a": []any{num("1"), num("2.5"), "x"}}, "t": true, "u": nil})
	if out[1].Value != nil {
		t.Errorf("tombstone decoded to %q", out[1].Value)
	}
}

// TestBadRecords: a record that cannot be decoded (an unknown schema id, a
// bad magic byte, a truncated frame, bytes that are not the schema's, a
// schema of another format, not JSON) fails the batch with a DataError
// naming its partition and offset, or with SkipBadRecords is left out and
// counted while the good records pass.
func TestBadRecords(t *testing.T) {
	reg := newRegistry(t)
	topic := topicName(t)
	id := register(t, reg, topic+"-value", sr.TypeAvro, accountV1)
	jsID := register(t, reg, topic+"-other", sr.TypeJSON, `{"type":"object"}`)
	good, err := avro.Marshal(avro.MustParse(accountV1), accountV1Go{ID: 5, Name: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	goodRec := fold.Record{Partition: 2, Offset: 1, Key: []byte("good"), Value: framed(t, id, nil, good)}
	bad := []struct {
		name  string
		value []byte
		want  string // in the reason
	}{
		{"unknown schema id", framed(t, id+1000, nil, good), "unknown schema id"},
		{"bad magic byte", []byte(`{"id":5}`), "magic byte 0x7b"},
		{"truncated frame", []byte{0, 0, 0}, "truncated"},
		{"truncated body", framed(t, id, nil, good[:1]), "not Avro of schema id"},
		{"other format", framed(t, jsID, nil, []byte(`{}`)), "JSON schema, not Avro"},
		{"empty value", []byte{}, "empty"},
	}
	for i, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			rec := fold.Record{Partition: 3, Offset: int64(40 + i), Key: []byte("bad"), Value: b.value}
			d, err := decode.New(decode.Config{Topic: topic, Value: decode.Avro, Registry: decode.Registry{URL: reg.URL()}})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			_, err = d.Decode([]fold.Record{goodRec, rec})
			var de *fold.DataError
			if !errors.As(err, &de) || !errors.Is(err, fold.ErrInvalidData) {
				t.Fatalf("err %v (%T), want a *fold.DataError", err, err)
			}
			if de.Partition != 3 || de.Offset != rec.Offset || de.Topic != topic || de.Kind != fold.ReasonUndecodable {
				t.Errorf("DataError %+v: want %s/3@%d, kind %s", de, topic, rec.Offset, fold.ReasonUndecodable)
			}
			if !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), "3@"+itoa(rec.Offset)) {
				t.Errorf("message %q: want %q and the position", err, b.want)
			}

			skip, err := decode.New(decode.Config{Topic: topic, Value: decode.Avro, Registry: decode.Registry{URL: reg.URL()},
				OnBadRecord: fold.SkipBadRecords})
			if err != nil {
				t.Fatal(err)
			}
			defer skip.Close()
			out, err := skip.Decode([]fold.Record{rec, goodRec, rec})
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 1 || string(out[0].Key) != "good" || skip.Skipped() != 2 {
				t.Fatalf("skip: %d records out (want the good one), %d skipped (want 2)", len(out), skip.Skipped())
			}
			checkJSON(t, "good", out[0].Value, map[string]any{"id": num("5"), "name": "ok"})
		})
	}
	t.Run("not JSON", func(t *testing.T) {
		d, err := decode.New(decode.Config{Topic: topic, Value: decode.JSON})
		if err != nil {
			t.Fatal(err)
		}
		out, err := d.Decode([]fold.Record{{Offset: 0, Key: []byte("j"), Value: []byte(` {"b":1, "a":[true]} `)}})
		if err != nil {
			t.Fatal(err)
		}
		checkJSON(t, "json", out[0].Value, map[string]any{"a": []any{true}, "b": num("1")})
		_, err = d.Decode([]fold.Record{{Partition: 1, Offset: 7, Key: []byte("j"), Value: []byte(`{"a":`)}})
		var de *fold.DataError
		if !errors.As(err, &de) || de.Offset != 7 || de.Partition != 1 {
			t.Fatalf("err %v, want a DataError at 1@7", err)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestRegistryDown: a registry that cannot be reached fails the batch with
// ErrUnavailable, whatever OnBadRecord says, naming the record that needed
// the schema.
func TestRegistryDown(t *testing.T) {
	reg := srfake.New()
	topic := topicName(t)
	id := register(t, reg, topic+"-value", sr.TypeAvro, accountV1)
	url := reg.URL()
	reg.Close()
	good, _ := avro.Marshal(avro.MustParse(accountV1), accountV1Go{ID: 1, Name: "x"})
	d, err := decode.New(decode.Config{Topic: topic, Value: decode.Avro, Registry: decode.Registry{URL: url},
		OnBadRecord: fold.SkipBadRecords})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = d.Decode([]fold.Record{{Partition: 4, Offset: 9, Key: []byte("k"), Value: framed(t, id, nil, good)}})
	var re *decode.RegistryError
	if !errors.Is(err, decode.ErrUnavailable) || !errors.As(err, &re) {
		t.Fatalf("err %v (%T), want ErrUnavailable", err, err)
	}
	if errors.Is(err, fold.ErrInvalidData) || d.Skipped() != 0 {
		t.Errorf("a registry failure must not be a bad record (skipped %d)", d.Skipped())
	}
	if !strings.Contains(err.Error(), "4@9") || !strings.Contains(err.Error(), "schema id") {
		t.Errorf("message %q: want the record and the schema id", err)
	}
}

// TestRegistryAuth: basic and bearer credentials reach the registry; wrong
// ones are ErrUnavailable, and no message holds the secret.
func TestRegistryAuth(t *testing.T) {
	const user, pass, token = "svc", "pw-Sekr1t-value", "tok-Sekr1t-value"
	for _, c := range []struct {
		name      string
		expect    string
		good, bad decode.Registry
		secret    string
	}{
		{"basic", "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)),
			decode.Registry{Username: user, Password: pass}, decode.Registry{Username: user, Password: pass + "x"}, pass},
		{"bearer", "Bearer " + token, decode.Registry{BearerToken: token}, decode.Registry{BearerToken: token + "x"}, token},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := newRegistry(t, srfake.WithAuth(c.expect))
			topic := topicName(t)
			id := register(t, reg, topic+"-value", sr.TypeAvro, accountV1)
			good, _ := avro.Marshal(avro.MustParse(accountV1), accountV1Go{ID: 2, Name: "y"})
			batch := []fold.Record{{Key: []byte("k"), Value: framed(t, id, nil, good)}}
			c.good.URL, c.bad.URL = reg.URL(), reg.URL()

			d, err := decode.New(decode.Config{Topic: topic, Value: decode.Avro, Registry: c.good})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			out, err := d.Decode(batch)
			if err != nil {
				t.Fatal(err)
			}
			checkJSON(t, "value", out[0].Value, map[string]any{"id": num("2"), "name": "y"})

			d2, err := decode.New(decode.Config{Topic: topic, Value: decode.Avro, Registry: c.bad})
			if err != nil {
				t.Fatal(err)
			}
			defer d2.Close()
			_, err = d2.Decode(batch)
			if !errors.Is(err, decode.ErrUnavailable) {
				t.Fatalf("wrong credentials: err %v, want ErrUnavailable", err)
			}
			for _, shown := range []string{err.Error(), c.bad.String(), c.good.String()} {
				if strings.Contains(shown, c.secret) {
					t.Errorf("the secret shows in %q", shown)
				}
			}
		})
	}
}

// TestSettings: a registry format without a registry, an unknown format,
// conflicting credentials are ErrBadSetting before any record.
func TestSettings(t *testing.T) {
	for _, c := range []decode.Config{
		{Value: decode.Avro},
		{Key: decode.Protobuf, Registry: decode.Registry{}},
		{Value: "xml"},
		{Value: decode.JSONSchema, Registry: decode.Registry{URL: "localhost:8081"}},
		{Value: decode.Avro, Registry: decode.Registry{URL: "http://r:8081", Username: "u", Password: "p", BearerToken: "t"}},
	} {
		if _, err := decode.New(c); !errors.Is(err, decode.ErrBadSetting) {
			t.Errorf("New(%+v): err %v, want ErrBadSetting", c, err)
		}
	}
}
