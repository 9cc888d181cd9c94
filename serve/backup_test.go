package serve

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/store"
)

// copyTable reads table of the database file at path (read-only): its
// rows and the positions of its checkpoint.
func copyTable(t *testing.T, path, table string) (oracle, api.Positions) {
	t.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open the backup %s: %v", path, err)
	}
	defer db.Close()
	rows := oracle{}
	var pos api.Positions
	err = db.ReadTable(table, func(snap *store.Snapshot) error {
		p, _, err := snap.Positions()
		if err != nil {
			return err
		}
		pos = p
		return snap.Rows(nil, 0, func(k, v []byte) error { rows[string(k)] = string(v); return nil })
	})
	if err != nil {
		t.Fatalf("read table %s of the backup: %v", table, err)
	}
	return rows, pos
}

// getBackup takes GET /v1/backup into path and checks its length and
// digest headers against what it received.
func getBackup(t *testing.T, c *client, path string) store.BackupInfo {
	t.Helper()
	resp, err := c.hc.Get(c.base + "/v1/backup")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /v1/backup: %d %s", resp.StatusCode, b)
	}
	txid, _ := strconv.Atoi(resp.Header.Get(api.HeaderBackupTxID))
	info := store.BackupInfo{Bytes: resp.ContentLength, SHA256: resp.Header.Get(api.HeaderBackupSHA256), TxID: txid}
	if info.SHA256 == "" || info.TxID == 0 {
		t.Fatalf("backup headers %v", resp.Header)
	}
	err = store.WriteFileAtomic(path, func(w io.Writer) error {
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
		if err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); n != info.Bytes || got != info.SHA256 {
			return fmt.Errorf("received %d bytes with SHA-256 %s, sent %d with %s", n, got, info.Bytes, info.SHA256)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("backup into %s: %v", path, err)
	}
	return info
}

// TestBackupWhileServing: backups taken through the daemon while a
// follower applies a producer's records and a requested rebuild of
// another table runs are each one state of the database: in each copy,
// each table equals the oracle fold of its topic at the positions its
// checkpoint in the copy says, and the copy passes check. The daemon's
// reads answer throughout. A second backup while one is being sent is
// 409 backup_running. Restoring (the daemon stopped, the copy put in
// place of the file, the daemon started on it) serves the copy's tables,
// and the follower goes on from the copy's positions to the end.
func TestBackupWhileServing(t *testing.T) {
	liveTopic, staticTopic := unique(t, "live"), unique(t, "static")
	broker.TestTopic(t, liveTopic, 2, nil)
	broker.TestTopic(t, staticTopic, 2, nil)
	var live, static produced
	live.write(t, liveTopic, keyed(0, 200, 2, 80))
	static.write(t, staticTopic, keyed(0, 400, 2, 150))
	cfg := baseConfig(t, followedTable("live", liveTopic, FollowSettings{}), kafkaTable("static", staticTopic, nil))
	d := start(t, cfg)
	waitFor(t, "both tables served", 60*time.Second, func() bool {
		return d.c.table(t, "live").State == StateFollowing && d.c.table(t, "static").State == StateReady
	})

	dir := t.TempDir()
	for round := 1; round <= 4; round++ {
		live.write(t, liveTopic, keyed(round, 100, 2, 80))
		static.write(t, staticTopic, keyed(round, 100, 2, 150))
		// A rebuild requested (or the last one still running).
		if r := d.c.do(t, "POST", "/v1/tables/static/rebuild", nil); r.status != http.StatusAccepted && r.status != http.StatusOK &&
			(r.status != http.StatusConflict || r.apiErr(t).Code != api.CodeRunInProgress) {
			t.Fatalf("rebuild: %d %s", r.status, r.body)
		}
		path := filepath.Join(dir, fmt.Sprintf("backup-%d.db", round))
		info := getBackup(t, d.c, path)
		if r := d.c.get(t, "/v1/tables/live/count"); r.status != http.StatusOK {
			t.Fatalf("count after backup %d: %d", round, r.status)
		}
		for _, tb := range []struct {
			name string
			p    *produced
		}{{"live", &live}, {"static", &static}} {
			rows, pos := copyTable(t, path, tb.name)
			if diff := cmp.Diff(tb.p.foldAt(pos), rows); diff != "" {
				t.Fatalf("backup %d (tx %d), table %s at %v (-oracle +copy):\n%s", round, info.TxID, tb.name, pos, diff)
			}
		}
		rep, err := store.Check(path, nil)
		if err != nil || !rep.OK() {
			t.Fatalf("check of backup %d: %v %+v", round, err, rep)
		}
	}

	// A backup that is being sent: the next is refused. The first one's
	// answer is not read, so its handler holds the backup until the test
	// reads it (the file is larger than the socket's buffers).
	big := make([]byte, 8<<10)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	recs := keyed(9, 600, 2, 80)
	for i := range recs {
		if recs[i].Value != nil {
			recs[i].Value = append(recs[i].Value, big...)
		}
	}
	live.write(t, liveTopic, recs)
	want := live.ends()
	waitFor(t, "the big records applied", 60*time.Second, func() bool {
		_, pos := d.c.positions(t, "live")
		reached, _ := pos.Reached(want)
		return reached
	})
	first, err := d.c.hc.Get(d.c.base + "/v1/backup")
	if err != nil || first.StatusCode != http.StatusOK {
		t.Fatalf("first backup: %v %v", err, first)
	}
	r := d.c.get(t, "/v1/backup")
	if e := r.apiErr(t); r.status != http.StatusConflict || e.Code != api.CodeBackupRunning {
		t.Fatalf("a backup while one is sent: %d %s", r.status, r.body)
	}
	n, err := io.Copy(io.Discard, bufio.NewReader(first.Body))
	first.Body.Close()
	if err != nil || n != first.ContentLength {
		t.Fatalf("first backup: read %d of %d: %v", n, first.ContentLength, err)
	}
	waitFor(t, "the next backup allowed", 30*time.Second, func() bool {
		resp, err := d.c.hc.Get(d.c.base + "/v1/backup")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// Restore: the last backup in place of the file, the daemon started
	// on it.
	path := filepath.Join(dir, "restore.db")
	getBackup(t, d.c, path)
	saved, savedPos := copyTable(t, path, "live")
	d.stop(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.DBPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	live.write(t, liveTopic, keyed(10, 100, 2, 80))
	want = live.ends()
	d2 := start(t, cfg)
	if !cmp.Equal(saved, live.foldAt(savedPos)) {
		t.Fatalf("the restored copy's live table differs from the oracle at %v", savedPos)
	}
	waitFor(t, "the restored follower at the end", 60*time.Second, func() bool {
		if d2.c.table(t, "live").State != StateFollowing {
			return false
		}
		_, pos := d2.c.positions(t, "live")
		reached, _ := pos.Reached(want)
		return reached
	})
	got, _, _ := d2.c.scan(t, "live", 1000)
	_, pos := d2.c.positions(t, "live")
	if diff := cmp.Diff(live.foldAt(pos), got); diff != "" {
		t.Fatalf("restored and followed to %v (-oracle +got):\n%s", pos, diff)
	}
}

// positions is the positions header of GET /v1/tables/{table}/count.
func (c *client) positions(t *testing.T, table string) (uint64, api.Positions) {
	t.Helper()
	r := c.get(t, "/v1/tables/"+table+"/count")
	if r.status != http.StatusOK {
		t.Fatalf("count of %s: %d %s", table, r.status, r.body)
	}
	pos, err := api.ParsePositions(r.header.Get(HeaderPositions))
	if err != nil {
		t.Fatalf("positions of %s: %v", table, err)
	}
	return r.gen(t), pos
}
