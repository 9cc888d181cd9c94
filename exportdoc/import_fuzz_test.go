package exportdoc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// readAll reads a whole document: its header and rows, in order.
func readAll(doc []byte) (Header, [][2][]byte, error) {
	rd, err := NewReader(bytes.NewReader(doc), "fuzz.json")
	if err != nil {
		return Header{}, nil, err
	}
	var rows [][2][]byte
	for {
		k, v, ok, err := rd.Next()
		if err != nil {
			return rd.Header, rows, err
		}
		if !ok {
			if rd.Rows() != int64(len(rows)) {
				return rd.Header, rows, errors.New("Rows() disagrees with the rows returned")
			}
			return rd.Header, rows, nil
		}
		rows = append(rows, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
	}
}

// FuzzImportDocument: whatever the bytes that `import` reads, the reader
// never panics; it fails only with an *ImportError (ErrImport), or reads a
// header and rows that, written back as a document (header members, then
// the rows last), read back the same.
func FuzzImportDocument(f *testing.F) {
	good := `{
  "format": 1, "table": "t", "topic": "orders", "fold": "latest", "params": {"a": "b"},
  "end_mark": "high", "encoding": "utf-8",
  "partitions": [{"partition": 0, "next_offset": 3}], "updates_since_rebuild": 0,
  "totals": {"keys": 2, "records_read": 3, "records_skipped": 0},
  "rows": {"k1": "v1", "k2": ""}
}
`
	for _, s := range []string{
		good,
		strings.Replace(strings.Replace(good, `"utf-8"`, `"base64"`, 1), `{"k1": "v1", "k2": ""}`, `{"azE=": "djE=", "": ""}`, 1),
		strings.Replace(good, `"format": 1`, `"format": 2`, 1),
		strings.Replace(good, `"rows": {"k1": "v1", "k2": ""}`, `"rows": {}, "extra": 1`, 1),
		good + "trailing", `{"rows": {}}`, `[]`, `{"format": 1, "format": 1}`, "",
		strings.Replace(good, `"v1"`, `1`, 1), strings.Replace(good, `"utf-8"`, `"base64"`, 1),
		// A shard's members.
		strings.Replace(good, `"encoding"`, `"partition_set": "0,2-3", "partitions_of_topic": 4, "partitioner": "murmur2", "encoding"`, 1),
		strings.Replace(good, `"encoding"`, `"partition_set": "3-1", "partitions_of_topic": -1, "encoding"`, 1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		h, rows, err := readAll(doc)
		if err != nil {
			var ie *ImportError
			if !errors.As(err, &ie) || !errors.Is(err, ErrImport) || ie.Source != "fuzz.json" {
				t.Fatalf("error %v (%T): want an *ImportError of fuzz.json", err, err)
			}
			return
		}
		if h.Format != FormatVersion || (h.Encoding != "utf-8" && h.Encoding != "base64") {
			t.Fatalf("read a document of format %d, encoding %q", h.Format, h.Encoding)
		}
		// Written back: the header as Reader read it, the rows last, in
		// their order (repeated keys too).
		hb, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.Write(hb[:len(hb)-1])
		buf.WriteString(`,"rows":{`)
		for i, r := range rows {
			k, v := string(r[0]), string(r[1])
			if h.Encoding == "base64" {
				k, v = base64.StdEncoding.EncodeToString(r[0]), base64.StdEncoding.EncodeToString(r[1])
			}
			kj, _ := json.Marshal(k)
			vj, _ := json.Marshal(v)
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.Write(kj)
			buf.WriteByte(':')
			buf.Write(vj)
		}
		buf.WriteString("}}")
		h2, rows2, err := readAll(buf.Bytes())
		if err != nil {
			t.Fatalf("written back %s: %v", buf.Bytes(), err)
		}
		if !reflect.DeepEqual(h, h2) || !reflect.DeepEqual(rows, rows2) {
			t.Fatalf("written back and read again:\n%+v %q\nwant\n%+v %q", h2, rows2, h, rows)
		}
	})
}
