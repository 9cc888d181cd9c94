package materialize

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/fold"
	"github.com/kmaterialize/kmaterialize/internal/cpushare"
	"github.com/kmaterialize/kmaterialize/store"
)

// plainCount is a plain fold of count events: for each identity, each
// distinct value (the generator writes one content as one byte string) at
// its lowest position.
type plainCount struct {
	ids     map[string]map[string]fold.Position // identity -> value -> lowest position
	groupOf map[string]string                   // value -> group
	records int64
}

func (o *plainCount) add(id, group, value string, pos fold.Position) {
	o.records++
	vs := o.ids[id]
	if vs == nil {
		vs = map[string]fold.Position{}
		o.ids[id] = vs
	}
	if old, ok := vs[value]; !ok || pos.Compare(old) < 0 {
		vs[value] = pos
	}
	o.groupOf[value] = group
}

// genCountBatches returns n count events over ids identities in batches of
// 1 to 50 over three partitions (an identity in one partition, except the
// identity "hot", which is in every batch and every partition). forward
// walks the identities in order, round after round; random picks them at
// random. Each identity has one content (its group and a payload), repeated
// as duplicates; with conflicts, one identity in 50 gets a second content
// now and then.
func genCountBatches(rng *rand.Rand, order string, n, ids int, conflicts bool) ([][]fold.Record, *plainCount) {
	o := &plainCount{ids: map[string]map[string]fold.Position{}, groupOf: map[string]string{}}
	offsets := map[int32]int64{}
	var out [][]fold.Record
	next := 0
	event := func(id int, p int32, variant int) fold.Record {
		idText := fmt.Sprintf("e%05d", id)
		if id < 0 {
			idText = "hot"
		}
		group := fmt.Sprintf("b%d", (id+variant+10)%7)
		value := fmt.Sprintf(`{"id":%q,"g":%q,"pay":"p%d"}`, idText, group, variant)
		pos := fold.Position{Partition: p, Offset: offsets[p]}
		offsets[p]++
		o.add(idText, group, value, pos)
		return fold.Record{Partition: p, Offset: pos.Offset, Key: []byte(idText), Value: []byte(value)}
	}
	for i := 0; i < n; {
		size := 1 + rng.IntN(50)
		b := make([]fold.Record, 0, size+1)
		for j := 0; j < size && i < n; j, i = j+1, i+1 {
			var id int
			if order == "forward" {
				id = next % ids
				next++
			} else {
				id = rng.IntN(ids)
			}
			variant := 0
			if conflicts && id%50 == 7 && rng.IntN(3) == 0 {
				variant = 1
			}
			b = append(b, event(id, int32(id%3), variant))
		}
		b = append(b, event(-1, int32(rng.IntN(3)), 0))
		out = append(out, b)
	}
	return out, o
}

// TestCountExternalSortMatchesOracle drives the writer with the count fold
// and hold budgets small enough to spill many runs, in forward and random
// identity order, and compares with a plain fold of the same events: the
// published rows (distinct identities per group), the key count, the
// fold's counters, and the on-disk identity index (each identity's
// contents at their lowest positions, duplicates across runs merged); with
// conflicts, the error names the smallest conflicting identity and its two
// lowest positions, and nothing is written as rows.
func TestCountExternalSortMatchesOracle(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, conflicts := range []bool{false, true} {
		for _, order := range []string{"forward", "random"} {
			for _, hold := range []int{1, 4 << 10, 64 << 10} {
				// slots 1: the folds, spills, merge and Finish take turns
				// on one slot, as in a daemon on two cores.
				for _, slots := range []int{0, 1} {
					t.Run(fmt.Sprintf("conflicts=%v/%s/hold=%d/slots=%d", conflicts, order, hold, slots), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(seed, uint64(hold)))
						batches, o := genCountBatches(rng, order, 4000, 700, conflicts)
						testCountExternal(t, batches, o, hold, slots)
					})
				}
			}
		}
	}
}

func testCountExternal(t *testing.T, batches [][]fold.Record, o *plainCount, hold, slots int) {
	// The oracle's table, counters and index.
	rows := map[string]string{}
	var pairs int64
	var conflicting []string
	index := map[string][]fold.Position{}
	for id, vs := range o.ids {
		pairs += int64(len(vs))
		var low string
		for v, p := range vs {
			index[id] = append(index[id], p)
			if low == "" || p.Compare(vs[low]) < 0 {
				low = v
			}
		}
		slices.SortFunc(index[id], func(a, b fold.Position) int { return a.Compare(b) })
		if len(vs) > 1 {
			conflicting = append(conflicting, id)
		}
		g := o.groupOf[low]
		n, _ := strconv.Atoi(rows[g])
		rows[g] = strconv.Itoa(n + 1)
	}
	slices.Sort(conflicting)

	path := filepath.Join(t.TempDir(), "c.db")
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	gen, err := db.Begin("t")
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Abort()
	f, err := fold.NewCount(fold.CountConfig{Topic: "votes", IdentityField: "id", GroupField: "g"})
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(gen, f, 1024, 4096, hold)
	if slots > 0 {
		w.share = cpushare.New(slots)
		gen.Pace(w.share)
	}
	w.start(context.Background())
	for _, b := range batches {
		if err := w.send(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	err = w.finish(context.Background())
	if w.runs < 3 {
		t.Fatalf("%d runs spilled, want several (the test would not exercise the merge)", w.runs)
	}
	if _, serr := os.Stat(store.RunsDir(path)); !errors.Is(serr, fs.ErrNotExist) {
		t.Fatalf("run files left after the merge: %v", serr)
	}
	st := f.Stats()
	wantExtra := map[string]int64{"logical_events": int64(len(o.ids)), "duplicates_folded": o.records - pairs, "conflicts": int64(len(conflicting))}
	if d := cmp.Diff(wantExtra, st.Extra); d != "" || st.Records != o.records {
		t.Fatalf("stats: records %d (want %d), extra (-oracle +fold):\n%s", st.Records, o.records, d)
	}
	if len(conflicting) > 0 {
		var ce *fold.ConflictError
		if !errors.As(err, &ce) {
			t.Fatalf("finish: %v, want a *fold.ConflictError", err)
		}
		id := conflicting[0]
		want := &fold.ConflictError{Topic: "votes", Field: "id", Identity: id, First: index[id][0], Second: index[id][1], Identities: int64(len(conflicting))}
		if d := cmp.Diff(want, ce); d != "" {
			t.Fatalf("conflict (-oracle +fold):\n%s", d)
		}
		if has, err := gen.HasRows(); err != nil || has {
			t.Fatalf("rows written despite the conflict (%v)", err)
		}
		t.Logf("%d records, %d identities, %d conflicting, %d runs", o.records, len(o.ids), len(conflicting), w.runs)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := gen.Publish(store.TableMeta{}, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if err := db.Scan("t", nil, 0, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(rows, got); d != "" {
		t.Fatalf("rows (-oracle +external sort):\n%s", d)
	}
	m, err := db.Table("t")
	if err != nil {
		t.Fatal(err)
	}
	if m.Keys != int64(len(rows)) {
		t.Fatalf("meta keys %d (counted as written), want %d", m.Keys, len(rows))
	}
	gotIndex := readIdentityIndex(t, db, gen.ID())
	if d := cmp.Diff(index, gotIndex); d != "" {
		t.Fatalf("identity index positions (-oracle +index):\n%s", d)
	}
	t.Logf("%d records, %d identities, %d runs", o.records, len(o.ids), w.runs)
}

// readIdentityIndex reads the count fold's index of generation gen with
// bbolt: identity -> the positions of its entries (hash, partition,
// offset), sorted.
func readIdentityIndex(t *testing.T, db *store.DB, gen uint64) map[string][]fold.Position {
	t.Helper()
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out := map[string][]fold.Position{}
	err = b.View(func(tx *bolt.Tx) error {
		ix := tx.Bucket(store.BucketGenerations).Bucket(store.GenerationKey(gen)).Bucket(store.BucketIndex).Bucket([]byte(fold.IdentityIndex))
		if ix == nil {
			return errors.New("no identity index")
		}
		return ix.ForEach(func(k, v []byte) error {
			const entry = 32 + 4 + 8
			if len(v) == 0 || len(v)%entry != 0 {
				return fmt.Errorf("identity %q: entry of %d bytes", k, len(v))
			}
			var ps []fold.Position
			for e := 0; e < len(v); e += entry {
				ps = append(ps, fold.Position{Partition: int32(binary.BigEndian.Uint32(v[e+32:])), Offset: int64(binary.BigEndian.Uint64(v[e+36:]))})
			}
			slices.SortFunc(ps, func(a, b fold.Position) int { return a.Compare(b) })
			out[string(k)] = ps
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
