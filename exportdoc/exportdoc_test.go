package exportdoc_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/exportdoc"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/store"
)

// table is what a test publishes: rows, the metadata the document carries
// and the checkpoint.
type table struct {
	name, topic string
	rows        map[string][]byte
	records     int64
	skipped     int64
	cp          checkpoint.Checkpoint
}

func openDB(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "t.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// publish writes tb into db as one generation of a latest table, its rows
// put in the order given by order (the document must not depend on it),
// with its checkpoint saved in the publish.
func publish(t *testing.T, db *store.DB, tb table, order []string) {
	t.Helper()
	g, err := db.Begin(tb.name)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Abort()
	err = g.Write(func(r store.Rows) error {
		for _, k := range order {
			if err := r.Put([]byte(k), tb.rows[k]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	meta := store.TableMeta{Topic: tb.topic, Fold: materialize.FoldLatest, BuiltAt: time.Now(), Duration: time.Duration(rand.Int64N(1e9)),
		Records: tb.records, Skipped: tb.skipped}
	if err := g.Publish(meta, func(tx *bolt.Tx) error { return checkpoint.Save(tx, tb.name, tb.cp) }); err != nil {
		t.Fatal(err)
	}
}

// generate is a table of n rows; with binary, some keys and values are not
// UTF-8. Values include empty ones and JSON-unfriendly text.
func generate(rng *rand.Rand, name string, n int, binary bool) table {
	tb := table{name: name, topic: "topic-" + name, rows: map[string][]byte{}}
	for len(tb.rows) < n {
		k := fmt.Sprintf("key-%05d", rng.IntN(10*n))
		var v []byte
		switch rng.IntN(10) {
		case 0:
			v = []byte{}
		case 1:
			v = []byte("quote \" backslash \\ newline \n tab \t é ✓ <>&")
		case 2:
			if binary {
				v = []byte{0xff, 0x00, byte(rng.IntN(256))}
				k += "\xfe"
			}
		default:
			v = fmt.Appendf(nil, `{"n":%d}`, rng.IntN(1000))
		}
		tb.rows[k] = v
	}
	tb.records = int64(n) + rng.Int64N(100)
	tb.skipped = rng.Int64N(10)
	for p := range int32(3) {
		low := rng.Int64N(5)
		high := low + rng.Int64N(1000)
		tb.cp.Partitions = append(tb.cp.Partitions, checkpoint.Partition{Partition: p, Low: low, Start: low, High: high, End: high})
	}
	tb.cp.Topic, tb.cp.EndMark = tb.topic, checkpoint.EndStable
	return tb
}

func sortedKeys(rows map[string][]byte) []string {
	ks := make([]string, 0, len(rows))
	for k := range rows {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

type row struct{ Key, Value string }

// readDoc reads a whole document with the package's Reader.
func readDoc(t *testing.T, doc []byte) (exportdoc.Header, []row) {
	t.Helper()
	rd, err := exportdoc.NewReader(bytes.NewReader(doc), "doc.json")
	if err != nil {
		t.Fatalf("read the document: %v\n%s", err, doc)
	}
	var rows []row
	for {
		k, v, ok, err := rd.Next()
		if err != nil {
			t.Fatalf("row %d: %v", len(rows)+1, err)
		}
		if !ok {
			break
		}
		rows = append(rows, row{string(k), string(v)})
	}
	if rd.Rows() != int64(len(rows)) {
		t.Fatalf("Rows() = %d, Next returned %d", rd.Rows(), len(rows))
	}
	return rd.Header, rows
}

// wantDoc is the oracle: the header and rows the document of tb must hold.
func wantDoc(tb table, encoding string) (exportdoc.Header, []row) {
	h := exportdoc.Header{Format: exportdoc.FormatVersion, Table: tb.name, Topic: tb.topic, Fold: materialize.FoldLatest,
		Params: map[string]string{}, EndMark: tb.cp.EndMark, Encoding: encoding, Partitions: tb.cp.Partitions,
		Totals: map[string]int64{"keys": int64(len(tb.rows)), "records_read": tb.records, "records_skipped": tb.skipped}}
	var rows []row
	for _, k := range sortedKeys(tb.rows) {
		rows = append(rows, row{k, string(tb.rows[k])})
	}
	return h, rows
}

func export(t *testing.T, db *store.DB, name string, opts exportdoc.Options) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := exportdoc.Write(db, name, &buf, opts); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRoundTrip: a table's document holds its provenance and its rows in key
// order (the oracle: the rows put, sorted); reading it gives them back
// byte for byte; importing it into another database and exporting that
// gives the same document; and the document depends only on the data:
// another database holding the same table, written in another order at
// another time, exports the same bytes.
func TestRoundTrip(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range []struct {
		name   string
		rows   int
		binary bool
		opts   exportdoc.Options
	}{
		{"utf-8", 300, false, exportdoc.Options{}},
		{"base64", 300, true, exportdoc.Options{Base64: true}},
		{"empty", 0, false, exportdoc.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(tc.rows)))
			tb := generate(rng, "orders", tc.rows, tc.binary)
			db := openDB(t)
			publish(t, db, tb, sortedKeys(tb.rows))
			doc := export(t, db, tb.name, tc.opts)

			encoding := "utf-8"
			if tc.opts.Base64 {
				encoding = "base64"
			}
			wantH, wantRows := wantDoc(tb, encoding)
			gotH, gotRows := readDoc(t, doc)
			if d := cmp.Diff(wantH, gotH); d != "" {
				t.Fatalf("header (-oracle +document):\n%s", d)
			}
			if d := cmp.Diff(wantRows, gotRows); d != "" {
				t.Fatalf("rows (-oracle +document):\n%s", d)
			}
			if tc.opts.Base64 {
				// On the wire the rows are base64 of the bytes.
				for _, k := range sortedKeys(tb.rows)[:min(3, len(tb.rows))] {
					if !bytes.Contains(doc, []byte(fmt.Sprintf("%q: %q", base64.StdEncoding.EncodeToString([]byte(k)), base64.StdEncoding.EncodeToString(tb.rows[k])))) {
						t.Fatalf("row %q is not in the document as base64", k)
					}
				}
			}

			// Same data, another file, another insertion order and time.
			other := openDB(t)
			shuffled := sortedKeys(tb.rows)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			publish(t, other, tb, shuffled)
			if again := export(t, other, tb.name, tc.opts); !bytes.Equal(doc, again) {
				t.Fatalf("the same table in another file exports other bytes:\n%s", cmp.Diff(string(doc), string(again)))
			}

			// Import (a latest table) into a fresh file, export again.
			imported := openDB(t)
			if _, err := materialize.Import(context.Background(), materialize.ImportOptions{DB: imported, In: bytes.NewReader(doc), Source: "doc.json", Log: zerolog.Nop()}); err != nil {
				t.Fatalf("import: %v", err)
			}
			if again := export(t, imported, tb.name, tc.opts); !bytes.Equal(doc, again) {
				t.Fatalf("export of the imported table differs:\n%s", cmp.Diff(string(doc), string(again)))
			}
		})
	}
}

// TestWritePagedIsWrite: the paged export (short read transactions, rows
// over several PagedChunkBytes chunks) writes the same bytes as Write.
func TestWritePagedIsWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	tb := generate(rng, "big", 10, false)
	big := bytes.Repeat([]byte("v"), 1000)
	for i := range 3 * exportdoc.PagedChunkBytes / len(big) {
		tb.rows[fmt.Sprintf("bulk-%06d", i)] = big
	}
	db := openDB(t)
	publish(t, db, tb, sortedKeys(tb.rows))
	want := export(t, db, tb.name, exportdoc.Options{})
	if len(want) < 2*exportdoc.PagedChunkBytes {
		t.Fatalf("document of %d bytes: not over two chunks", len(want))
	}
	var cp checkpoint.Checkpoint
	p, err := db.NewPager(tb.name, func(s *store.Snapshot) error {
		var err error
		cp, _, err = checkpoint.Load(s.Tx, tb.name)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got bytes.Buffer
	if err := exportdoc.WritePaged(p, cp, &got, exportdoc.Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got.Bytes()) {
		t.Fatalf("WritePaged wrote %d bytes, Write %d; they differ", got.Len(), len(want))
	}
}

// TestNotUTF8 is the contract for bytes that are not text: without Base64
// the export fails with ErrNotUTF8 before its first byte, and WriteFile
// leaves the previous file as it was, with no temporary file beside it.
func TestNotUTF8(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	tb := generate(rng, "bin", 50, false)
	db := openDB(t)
	publish(t, db, tb, sortedKeys(tb.rows))
	dir := t.TempDir()
	path := filepath.Join(dir, "bin.json")
	if err := exportdoc.WriteFile(db, tb.name, path, exportdoc.Options{}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	tb.rows[sortedKeys(tb.rows)[len(tb.rows)-1]] = []byte{'o', 'k', 0xff} // the last row: the check must run before any byte
	publish(t, db, tb, sortedKeys(tb.rows))
	var buf bytes.Buffer
	err = exportdoc.Write(db, tb.name, &buf, exportdoc.Options{})
	if !errors.Is(err, exportdoc.ErrNotUTF8) {
		t.Fatalf("err = %v, want ErrNotUTF8", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("a failed export wrote %d bytes", buf.Len())
	}
	if err := exportdoc.WriteFile(db, tb.name, path, exportdoc.Options{}); !errors.Is(err, exportdoc.ErrNotUTF8) {
		t.Fatalf("WriteFile: err = %v, want ErrNotUTF8", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("a failed WriteFile changed the previous file")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d entries after a failed WriteFile, want the one document", len(entries))
	}
}

// TestReaderRefuses: documents the reader must refuse, each an
// *ImportError (ErrImport): made from a good document by one edit.
func TestReaderRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	tb := generate(rng, "t", 0, false)
	tb.rows = map[string][]byte{"a": []byte("x"), "b": []byte("y")}
	db := openDB(t)
	publish(t, db, tb, sortedKeys(tb.rows))
	doc := string(export(t, db, tb.name, exportdoc.Options{}))
	readAll := func(doc string) error {
		rd, err := exportdoc.NewReader(bytes.NewReader([]byte(doc)), "doc.json")
		if err != nil {
			return err
		}
		for {
			_, _, ok, err := rd.Next()
			if err != nil || !ok {
				return err
			}
		}
	}
	if err := readAll(doc); err != nil {
		t.Fatalf("the good document: %v", err)
	}
	for name, edit := range map[string]string{
		"another format":       replaceOnce(t, doc, fmt.Sprintf(`"format": %d`, exportdoc.FormatVersion), `"format": 99`),
		"an unknown encoding":  replaceOnce(t, doc, `"encoding": "utf-8"`, `"encoding": "latin-1"`),
		"no topic member":      replaceOnce(t, doc, fmt.Sprintf(`"topic": %q,`, tb.topic), ``),
		"data after it":        doc + "{}",
		"a member after rows":  doc[:len(doc)-2] + `, "extra": 1}` + "\n",
		"a value not a string": replaceOnce(t, doc, `"a": "x"`, `"a": 1`),
		"truncated":            doc[:len(doc)-4],
	} {
		err := readAll(edit)
		var ie *exportdoc.ImportError
		if !errors.Is(err, exportdoc.ErrImport) || !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want an *ImportError", name, err)
		}
	}
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	i := bytes.Index([]byte(s), []byte(old))
	if i < 0 {
		t.Fatalf("%q is not in the document:\n%s", old, s)
	}
	return s[:i] + new + s[i+len(old):]
}
