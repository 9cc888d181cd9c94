package fold

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLatestKeyTooLarge: a key of MaxKeySize bytes is a row; one byte more is
// a bad record: a *DataError naming its position and size by default, or,
// with SkipBadRecords, left out and counted, the table being what a plain
// fold without it gives.
func TestLatestKeyTooLarge(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	big := strings.Repeat("k", MaxKeySize+1)
	edge := strings.Repeat("e", MaxKeySize)
	var recs []Record
	var badAt []Position
	for i := range 300 {
		r := Record{Partition: 0, Offset: int64(i), Key: []byte("k" + strconv.Itoa(rng.IntN(20))), Value: []byte("v" + strconv.Itoa(i))}
		switch rng.IntN(15) {
		case 0:
			r.Key = []byte(big)
			badAt = append(badAt, Position{0, int64(i)})
		case 1:
			r.Key = []byte(edge)
		case 2:
			r.Key = nil
		}
		recs = append(recs, r)
	}
	recs = append(recs, Record{Partition: 0, Offset: 300, Key: []byte(big), Value: []byte("last")})
	badAt = append(badAt, Position{0, 300})

	// Oracle: last value per key, leaving out null keys and oversized keys.
	want := map[string]string{}
	for _, r := range recs {
		if r.Key != nil && len(r.Key) <= MaxKeySize {
			want[string(r.Key)] = string(r.Value)
		}
	}
	nullKeys := int64(0)
	for _, r := range recs {
		if r.Key == nil {
			nullKeys++
		}
	}

	for _, budget := range []int{0, 1 << 20} {
		t.Run(fmt.Sprintf("budget %d", budget), func(t *testing.T) {
			// Batches of 7 records, or of 40, which the fold looks up in
			// groups of touchGroup (held.putAll).
			step := 7
			if budget > 0 {
				step = 40
			}
			// fail: the first oversized key stops the fold.
			l := NewLatestWith(LatestConfig{Topic: topic})
			if budget > 0 {
				l.RetainRecords(budget)
			}
			var err error
			for i := 0; i < len(recs) && err == nil; i += step {
				err = l.Fold(newMemTable(), recs[i:min(i+step, len(recs))])
			}
			var de *DataError
			if !errors.As(err, &de) || !errors.Is(err, ErrInvalidData) || de.Kind != ReasonKeyTooLarge {
				t.Fatalf("Fold = %v, want a key_too_large *DataError", err)
			}
			if got := (Position{de.Partition, de.Offset}); got != badAt[0] {
				t.Fatalf("DataError at %s, want the first oversized key at %s", got, badAt[0])
			}
			wantMsg := fmt.Sprintf("%s/%s: key is %d bytes, over the %d-byte key limit", topic, badAt[0], MaxKeySize+1, MaxKeySize)
			if err.Error() != wantMsg {
				t.Fatalf("message %q, want %q", err, wantMsg)
			}

			// skip: every oversized key is counted and left out.
			l = NewLatestWith(LatestConfig{Topic: topic, OnBadRecord: SkipBadRecords})
			if budget > 0 {
				l.RetainRecords(budget)
			}
			tab := newMemTable()
			for i := 0; i < len(recs); i += step {
				if err := l.Fold(tab, recs[i:min(i+step, len(recs))]); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Finish(tab); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, tab.rows()); d != "" {
				t.Fatalf("rows (-oracle +got):\n%s", d)
			}
			st := l.Stats()
			wantReasons := map[string]int64{ReasonKeyTooLarge: int64(len(badAt))}
			if nullKeys > 0 {
				wantReasons[ReasonNullKey] = nullKeys
			}
			if st.Records != int64(len(recs)) || st.Skipped != int64(len(badAt))+nullKeys || !cmp.Equal(st.SkippedByReason, wantReasons) {
				t.Fatalf("stats %+v, want %d records, reasons %v", st, len(recs), wantReasons)
			}
		})
	}
}

// TestCountBadRecords: each kind of bad record fails the fold with its Kind by
// default; with SkipBadRecords all of them are counted by reason, and the
// rows are those of the good records alone. A conflict still refuses
// publication.
func TestCountBadRecords(t *testing.T) {
	long := strings.Repeat("x", MaxKeySize+1)
	bad := []struct {
		value string
		kind  string
	}{
		{`not json`, ReasonUndecodable},
		{`{"booth":"cedar"}`, ReasonUndecodable},
		{`{"event_id":"u-1","booth":"oak"}`, ReasonUnknownGroup},
		{`{"event_id":"` + long + `","booth":"cedar"}`, ReasonKeyTooLarge},
		{`{"event_id":"u-2","booth":"` + long + `"}`, ReasonKeyTooLarge},
	}
	good := []string{`{"event_id":"v-1","booth":"cedar"}`, `{"event_id":"v-2","booth":"maple"}`, `{"event_id":"v-1","booth":"cedar"}`}
	cfg := CountConfig{Topic: topic, IdentityField: "event_id", GroupField: "booth", Catalog: votesCatalog}

	for _, b := range bad {
		c, err := NewCount(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Fold(newMemTable(), []Record{{Partition: 1, Offset: 9, Value: []byte(b.value)}})
		var de *DataError
		if !errors.As(err, &de) || de.Kind != b.kind || de.Partition != 1 || de.Offset != 9 {
			t.Fatalf("%.40s: Fold = %v, want a %s DataError at 1@9", b.value, err, b.kind)
		}
		if b.kind == ReasonKeyTooLarge && !strings.Contains(err.Error(), fmt.Sprintf("is %d bytes, over the %d-byte key limit", MaxKeySize+1, MaxKeySize)) {
			t.Fatalf("message %q lacks the size", err)
		}
	}

	var values []string
	wantReasons := map[string]int64{}
	for i, g := range good {
		values = append(values, g, bad[i%len(bad)].value)
		wantReasons[bad[i%len(bad)].kind]++
	}
	for _, b := range bad[len(good):] {
		values = append(values, b.value)
		wantReasons[b.kind]++
	}
	skipCfg := cfg
	skipCfg.OnBadRecord = SkipBadRecords
	c, err := NewCount(skipCfg)
	if err != nil {
		t.Fatal(err)
	}
	tab := newMemTable()
	if err := c.Fold(tab, parts(values)[0]); err != nil {
		t.Fatal(err)
	}
	if c.Empty() {
		t.Fatal("Empty with two votes counted")
	}
	if err := c.Finish(tab); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(oracleCount(t, cfg, parts(good)).Rows, tab.rows()); d != "" {
		t.Fatalf("rows (-oracle over the good records +got):\n%s", d)
	}
	st := c.Stats()
	if st.Records != int64(len(values)) || st.Skipped != int64(len(bad)) || !cmp.Equal(st.SkippedByReason, wantReasons) {
		t.Fatalf("stats %+v, want %d records, %d skipped by %v", st, len(values), len(bad), wantReasons)
	}

	// A conflict is not a bad record: skip does not hide it.
	c, err = NewCount(skipCfg)
	if err != nil {
		t.Fatal(err)
	}
	tab = newMemTable()
	if err := c.Fold(tab, parts([]string{`{"event_id":"v-1","booth":"cedar"}`, `{"event_id":"v-1","booth":"maple"}`})[0]); err != nil {
		t.Fatal(err)
	}
	var ce *ConflictError
	if err := c.Finish(tab); !errors.As(err, &ce) {
		t.Fatalf("Finish = %v, want a conflict with --on-bad-record skip", err)
	}
}

// TestCountEmpty: a count table with a catalog has rows but is empty when no
// record counted toward any group.
func TestCountEmpty(t *testing.T) {
	c, err := NewCount(CountConfig{IdentityField: "event_id", GroupField: "booth", Catalog: votesCatalog, OnBadRecord: SkipBadRecords})
	if err != nil {
		t.Fatal(err)
	}
	tab := newMemTable()
	if err := c.Fold(tab, parts([]string{`not json`})[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(tab); err != nil {
		t.Fatal(err)
	}
	if !c.Empty() || len(tab.rows()) != len(votesCatalog) {
		t.Fatalf("Empty %v with rows %v, want empty with the %d catalog rows", c.Empty(), tab.rows(), len(votesCatalog))
	}
}
