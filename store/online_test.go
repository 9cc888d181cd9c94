package store

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// TestCompactOnline: a file with free pages (a table published three
// times over) is compacted under the open DB while readers scan the table
// and a writer applies commits: no read fails and each sees a state of
// the oracle (the published rows and the applies up to its counter row);
// no apply fails; the file shrinks; afterwards the table equals the
// oracle after every apply, later applies land in the new file, and the
// closed file passes Check.
func TestCompactOnline(t *testing.T) {
	db := openTemp(t)
	var base oracle
	for i := 0; i < 3; i++ {
		base, _ = publishOps(t, db, "t", uint64(100+i), 3000)
	}
	m, err := db.Table("t")
	if err != nil {
		t.Fatal(err)
	}
	want := func(n int) oracle {
		o := oracle{}
		for k, v := range base {
			o[k] = v
		}
		for i := 0; i <= n; i++ {
			o[fmt.Sprintf("seq/%04d", i)] = strconv.Itoa(i)
			o["n"] = strconv.Itoa(i)
		}
		return o
	}
	apply := func(i int) error {
		_, err := db.Apply("t", m.Generation, func(tb Rows) error {
			if err := tb.Put([]byte(fmt.Sprintf("seq/%04d", i)), []byte(strconv.Itoa(i))); err != nil {
				return err
			}
			return tb.Put([]byte("n"), []byte(strconv.Itoa(i)))
		}, nil, nil)
		return err
	}
	var applied atomic.Int64
	applied.Store(-1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := apply(i); err != nil {
				errs <- fmt.Errorf("apply %d: %w", i, err)
				return
			}
			applied.Store(int64(i))
		}
	}()
	var reads atomic.Int64
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() { // a reader
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				rows := oracle{}
				err := db.ReadTable("t", func(snap *Snapshot) error {
					return snap.Rows(nil, 0, func(k, v []byte) error { rows[string(k)] = string(v); return nil })
				})
				if err != nil {
					errs <- fmt.Errorf("read: %w", err)
					return
				}
				n := -1
				if v, ok := rows["n"]; ok {
					n, _ = strconv.Atoi(v)
				}
				if !cmp.Equal(want(n), rows) {
					errs <- fmt.Errorf("a read at apply %d is not the oracle's state", n)
					return
				}
				reads.Add(1)
			}
		}()
	}
	for applied.Load() < 20 {
		time.Sleep(time.Millisecond)
	}
	res, err := db.CompactOnline()
	if err != nil {
		t.Fatal(err)
	}
	atCompact := applied.Load()
	for applied.Load() < atCompact+20 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("compacted %d -> %d bytes, writers paused %s, readers %s; %d reads, %d applies", res.Before, res.After, res.Paused, res.Swap, reads.Load(), applied.Load()+1)
	if res.After >= res.Before || res.After <= 0 {
		t.Fatalf("compaction %d -> %d bytes: want smaller", res.Before, res.After)
	}
	_, rows := scanAll(t, db, "t")
	if diff := cmp.Diff(want(int(applied.Load())), rows); diff != "" {
		t.Fatalf("after the compaction and more applies (-oracle +got):\n%s", diff)
	}
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The pages in use (bbolt grows the file itself ahead of them).
	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	if err := ro.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	ro.Close()
	if used >= res.Before/2 {
		t.Fatalf("the file after more applies uses %d bytes, compacted from %d", used, res.Before)
	}
	rep, err := Check(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		if p != `table "t" has no checkpoint` { // publishOps saves none
			t.Fatalf("check after the compaction: %v", rep.Problems)
		}
	}
}
