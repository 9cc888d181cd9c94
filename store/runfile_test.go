package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

var runCodecs = []runCodec{runPlain, runS2, runZstd}

// row is one run file entry as the tests' oracle holds it.
type row struct {
	key string
	val []byte // nil: a tombstone
}

// randomRows returns n rows in ascending key order: tombstones, present
// empty values, and some values larger than a small reader buffer.
func randomRows(rng *rand.Rand, n int) []row {
	keys := map[string]bool{}
	for len(keys) < n {
		keys[fmt.Sprintf("k%06d", rng.IntN(10*n+10))] = true
	}
	rows := make([]row, 0, n)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	}) {
		var v []byte
		switch rng.IntN(10) {
		case 0: // tombstone
		case 1:
			v = []byte{}
		case 2:
			v = make([]byte, 1000+rng.IntN(5000))
		default:
			v = make([]byte, rng.IntN(120))
		}
		for i := range v {
			v[i] = byte('a' + rng.IntN(4))
		}
		rows = append(rows, row{k, v})
	}
	return rows
}

func rowsSorted(rows []row) *sliceRows {
	s := &sliceRows{}
	for _, r := range rows {
		s.keys = append(s.keys, r.key)
		s.vals = append(s.vals, r.val)
	}
	return s
}

// readRows reads a run file's bytes back, copying each row.
func readRows(data []byte, buf, maxVal int) ([]row, error) {
	r, err := newRunReader("test.run", bytes.NewReader(data), buf)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if maxVal > 0 {
		r.maxVal = maxVal
	}
	var rows []row
	for {
		k, v, ok, err := r.Next()
		if err != nil {
			return rows, err
		}
		if !ok {
			return rows, nil
		}
		if v != nil {
			v = bytes.Clone(v)
			if v == nil {
				v = []byte{}
			}
		}
		rows = append(rows, row{string(k), v})
	}
}

func sameRows(t *testing.T, what string, got, want []row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.key != w.key || (g.val == nil) != (w.val == nil) || !bytes.Equal(g.val, w.val) {
			t.Fatalf("%s: row %d = %q %q (nil %v), want %q %q (nil %v)", what, i, g.key, g.val, g.val == nil, w.key, w.val, w.val == nil)
		}
	}
}

// TestRunFileRoundTrip writes random rows as a run file with each codec
// and reads them back with a buffer smaller than the larger entries (they
// are copied out) and one larger than all (they are returned in place):
// the same rows, tombstones and present empty values kept apart.
func TestRunFileRoundTrip(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	for _, codec := range runCodecs {
		want := randomRows(rng, 2000)
		var file bytes.Buffer
		if err := writeRun(&file, rowsSorted(want), codec); err != nil {
			t.Fatal(err)
		}
		for _, buf := range []int{64, 1 << 16} {
			got, err := readRows(file.Bytes(), buf, 0)
			if err != nil {
				t.Fatalf("codec %v, buffer %d: %v", codec, buf, err)
			}
			sameRows(t, fmt.Sprintf("codec %v, buffer %d", codec, buf), got, want)
		}
	}
}

// TestWriteMergedEachCodec merges runs written with each codec, and a mix
// (the codec is read from each file's header), and compares with a map
// fold of the same rows.
func TestWriteMergedEachCodec(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, mix := range []string{"none", "s2", "zstd", "mixed"} {
		t.Run(mix, func(t *testing.T) {
			db := openTemp(t)
			g, err := db.Begin("t")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for i := range 6 {
				codec := mix
				if mix == "mixed" {
					codec = runCodecs[i%3].String()
				}
				t.Setenv(EnvRunCompression, codec)
				rows := randomRows(rng, 500)
				for _, r := range rows {
					if r.val == nil {
						delete(want, r.key)
					} else {
						want[r.key] = string(r.val)
					}
				}
				if err := g.SpillRun(rowsSorted(rows)); err != nil {
					t.Fatal(err)
				}
			}
			if err := g.WriteMerged(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if err := g.Publish(TableMeta{}, nil); err != nil {
				t.Fatal(err)
			}
			_, got := scanAll(t, db, "t")
			if len(got) != len(want) {
				t.Fatalf("%d rows, want %d", len(got), len(want))
			}
			for k, v := range want {
				if string(got[k]) != v {
					t.Fatalf("key %q = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestRunCompressionUnknown: an unknown EnvRunCompression stops the spill
// with an error naming the variable, and leaves no run file.
func TestRunCompressionUnknown(t *testing.T) {
	t.Setenv(EnvRunCompression, "lz4")
	db := openTemp(t)
	g, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	err = g.SpillRun(rowsSorted([]row{{"a", []byte("1")}}))
	if err == nil || !strings.Contains(err.Error(), EnvRunCompression) {
		t.Fatalf("SpillRun with %s=lz4 = %v, want an error naming it", EnvRunCompression, err)
	}
	if g.Runs() != 0 {
		t.Fatalf("%d runs after a failed spill", g.Runs())
	}
}

// TestRunFileDamaged damages a spilled run file in each way the reader
// must notice (its header, a length past bbolt's limits, the file cut
// short, and, compressed, a flipped byte the codec's CRC catches) and
// checks WriteMerged fails with errRunDamaged naming the file, publishes
// nothing, and removes the run files.
func TestRunFileDamaged(t *testing.T) {
	rows := make([]row, 3000)
	for i := range rows {
		rows[i] = row{fmt.Sprintf("key-%06d", i), fmt.Appendf(nil, "value %d of a run file", i)}
	}
	type damage struct {
		name string
		fn   func(b []byte) []byte
	}
	hdr := len(runMagic) + 1
	damages := []damage{
		{"no header", func(b []byte) []byte { return b[:3] }},
		{"bad magic", func(b []byte) []byte { b[0] ^= 0xff; return b }},
		{"unknown codec", func(b []byte) []byte { b[hdr-1] = 9; return b }},
		{"cut in the body", func(b []byte) []byte { return b[:hdr+(len(b)-hdr)/2] }},
		{"cut one byte short", func(b []byte) []byte { return b[:len(b)-1] }},
	}
	plainOnly := []damage{
		{"key length over MaxKeySize", func(b []byte) []byte {
			return append(append(b[:hdr:hdr], 0xff, 0xff, 0x04, 0x02), "xy"...)
		}},
		{"value length over MaxValueSize", func(b []byte) []byte {
			return append(append(b[:hdr:hdr], 0x01), 0xff, 0xff, 0xff, 0xff, 0x0f, 'k')
		}},
		{"length overflows", func(b []byte) []byte {
			return append(b[:hdr:hdr], bytes.Repeat([]byte{0xff}, 11)...)
		}},
	}
	compressedOnly := []damage{
		{"flipped byte", func(b []byte) []byte { b[hdr+(len(b)-hdr)*2/3] ^= 0x10; return b }},
	}
	for _, codec := range runCodecs {
		ds := slices.Clone(damages)
		if codec == runPlain {
			ds = append(ds, plainOnly...)
		} else {
			ds = append(ds, compressedOnly...)
		}
		for _, d := range ds {
			t.Run(codec.String()+"/"+d.name, func(t *testing.T) {
				t.Setenv(EnvRunCompression, codec.String())
				db := openTemp(t)
				g, err := db.Begin("t")
				if err != nil {
					t.Fatal(err)
				}
				if err := g.SpillRun(rowsSorted(rows)); err != nil {
					t.Fatal(err)
				}
				path := g.runs[0]
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, d.fn(b), 0o600); err != nil {
					t.Fatal(err)
				}
				err = g.WriteMerged(context.Background(), nil)
				if !errors.Is(err, errRunDamaged) || !strings.Contains(err.Error(), path) {
					t.Fatalf("WriteMerged over a damaged run = %v, want errRunDamaged naming %s", err, path)
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("run file left after the failed merge: %v", err)
				}
			})
		}
	}
}

// FuzzRunReader reads arbitrary bytes as a run file. Properties: no panic
// and no allocation beyond the input's size (the value limit is lowered
// to keep the fuzzer's memory small; lengths past the data fail as the
// bytes run out); every error is errRunDamaged (the bytes are in memory:
// no I/O error); and rows read without error are in strictly ascending
// order (writeRun checks it) and, written again as a plain run file and
// read back, are the same rows.
func FuzzRunReader(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, codec := range runCodecs {
		var file bytes.Buffer
		if err := writeRun(&file, rowsSorted(randomRows(rng, 20)), codec); err != nil {
			f.Fatal(err)
		}
		f.Add(file.Bytes())
		f.Add(file.Bytes()[:file.Len()/2])
	}
	f.Add([]byte(runMagic + "\x00\x03abc\x00"))
	f.Add([]byte(runMagic + "\x00\x03\x04abcxyz"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, buf := range []int{16, 4096} {
			got, err := readRows(data, buf, 1<<16)
			if err != nil {
				if !errors.Is(err, errRunDamaged) {
					t.Fatalf("buffer %d: error %v is not errRunDamaged", buf, err)
				}
				continue
			}
			var again bytes.Buffer
			if err := writeRun(&again, rowsSorted(got), runPlain); err != nil {
				t.Fatalf("buffer %d: rows read without error do not write again: %v", buf, err)
			}
			back, err := readRows(again.Bytes(), buf, 1<<16)
			if err != nil {
				t.Fatalf("buffer %d: rewritten rows: %v", buf, err)
			}
			sameRows(t, "rewritten", back, got)
		}
	})
}
