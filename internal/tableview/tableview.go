// Package tableview owns the one conversion of a stored table (its
// metadata, checkpoint and kept generations) into the API's table, which
// the daemon answers and the CLI prints, read directly or through the
// daemon.
package tableview

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/kmaterialize/kmaterialize/api"
	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/store"
)

// FromSnapshot is the published table snap reads, as far as the file says:
// its metadata, checkpoint and kept generations. What only the daemon knows
// (state, runs, schedule, follower, definition) is left zero.
func FromSnapshot(snap *store.Snapshot) (api.Table, error) {
	return FromTx(snap.Tx, snap.Meta)
}

// FromTx is FromSnapshot for the table whose metadata is m, read in tx
// (`kmaterialize tables` reads every table in one transaction).
func FromTx(tx *bolt.Tx, m store.TableMeta) (api.Table, error) {
	t := FromMeta(m)
	cp, ok, err := checkpoint.Load(tx, m.Name)
	if err != nil {
		return t, fmt.Errorf("checkpoint of table %q: %w", m.Name, err)
	}
	if ok {
		t.EndMark, t.UpdatesSinceRebuild, t.CheckpointCapturedAt = cp.EndMark, cp.Updates, cp.CapturedAt
		t.Partitions = append(t.Partitions, Partitions(cp.Partitions)...)
	}
	kept, err := store.KeptGenerations(tx, m.Name)
	if err != nil {
		return t, fmt.Errorf("table %q: %w", m.Name, err)
	}
	for _, k := range kept {
		km := k.Meta
		kg := api.KeptGeneration{Generation: k.Generation, Topic: km.Topic, Fold: km.Fold, Params: km.Params, Keys: km.Keys,
			BuiltAt: km.BuiltAt, Duration: km.Duration, Records: km.Records, Skipped: km.Skipped,
			SkippedByReason: km.SkippedByReason, Empty: km.Empty, Extra: km.Extra, Until: Bound(km.Until),
			Changes: Changes(km.Changes), Partitions: []api.Partition{}}
		kcp, ok, err := store.KeptCheckpoint(tx, m.Name, k.Generation)
		if err != nil {
			return t, fmt.Errorf("checkpoint of kept generation %d of table %q: %w", k.Generation, m.Name, err)
		}
		if ok {
			kg.EndMark, kg.UpdatesSinceRebuild, kg.CheckpointCapturedAt = kcp.EndMark, kcp.Updates, kcp.CapturedAt
			kg.Partitions = append(kg.Partitions, Partitions(kcp.Partitions)...)
		}
		t.Kept = append(t.Kept, kg)
	}
	return t, nil
}

// FromMeta is the table m describes without its checkpoint: what a
// publish reports (Partitions empty).
func FromMeta(m store.TableMeta) api.Table {
	return api.Table{Name: m.Name, Topic: m.Topic, Fold: m.Fold, Params: m.Params, Generation: m.Generation,
		Keys: m.Keys, BuiltAt: m.BuiltAt, Duration: m.Duration, Records: m.Records, Skipped: m.Skipped,
		SkippedByReason: m.SkippedByReason, Empty: m.Empty, Extra: m.Extra, Until: Bound(m.Until),
		Changes: Changes(m.Changes), Partitions: []api.Partition{}}
}

// Partitions are a checkpoint's partitions on the wire, without live marks.
func Partitions(ps []checkpoint.Partition) []api.Partition {
	out := make([]api.Partition, len(ps))
	for i, p := range ps {
		out[i] = api.Partition{Partition: p.Partition, Low: p.Low, Start: p.Start, High: p.High, End: p.End}
	}
	return out
}

// Bound is b on the wire; nil stays nil.
func Bound(b *store.Bound) *api.Bound {
	if b == nil {
		return nil
	}
	return &api.Bound{Timestamp: b.Timestamp, Offsets: b.Offsets}
}

// Changes is c on the wire; nil stays nil.
func Changes(c *store.Changes) *api.Changes {
	if c == nil {
		return nil
	}
	return &api.Changes{From: c.From, FromKeys: c.FromKeys, Added: c.Added, Removed: c.Removed, Changed: c.Changed}
}
