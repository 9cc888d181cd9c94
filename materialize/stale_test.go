package materialize

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kmaterialize/kmaterialize/checkpoint"
	"github.com/kmaterialize/kmaterialize/replay"
)

// TestCheckContinues: each way a checkpoint stops fitting its topic is a
// *StaleCheckpointError naming it, and the ways it still fits pass.
func TestCheckContinues(t *testing.T) {
	captured := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cp := checkpoint.Checkpoint{Topic: "t", EndMark: checkpoint.EndHigh, CapturedAt: captured, Partitions: []checkpoint.Partition{
		{Partition: 0, Low: 0, Start: 0, High: 100, End: 100},
		{Partition: 1, Low: 0, Start: 0, High: 50, End: 50},
	}}
	plan := func(low1, high1 int64, configs map[string]string, cfgErr error, extra ...replay.PartitionBounds) replay.Plan {
		p := replay.Plan{Topic: "t", Partitions: append([]replay.PartitionBounds{
			{Partition: 0, Low: 0, High: 120, End: 120},
			{Partition: 1, Low: low1, High: high1, End: high1},
		}, extra...)}
		if configs != nil || cfgErr != nil {
			p.TopicConfig = &replay.TopicConfig{Values: configs, Err: cfgErr}
		}
		return p
	}
	deleteCfg := map[string]string{"cleanup.policy": "delete", "delete.retention.ms": "1000"}
	compact := func(ms string) map[string]string {
		return map[string]string{"cleanup.policy": "compact,delete", "delete.retention.ms": ms}
	}
	hour := "3600000"
	idA, idB := [16]byte{1}, [16]byte{2}
	withID := func(cp checkpoint.Checkpoint, id [16]byte) checkpoint.Checkpoint { cp.TopicID = id; return cp }
	planID := func(p replay.Plan, id [16]byte) replay.Plan { p.TopicID = id; return p }
	for _, tc := range []struct {
		name string
		cp   checkpoint.Checkpoint
		plan replay.Plan
		now  time.Time
		want string // "" passes; else a part of the message
	}{
		{"not asked", cp, plan(0, 60, nil, nil), captured.Add(1000 * time.Hour), ""},
		{"delete policy, old checkpoint", cp, plan(0, 60, deleteCfg, nil), captured.Add(1000 * time.Hour), ""},
		{"checkpoint at the low", cp, plan(50, 60, deleteCfg, nil), captured, ""},
		{"a partition added", cp, plan(0, 60, deleteCfg, nil, replay.PartitionBounds{Partition: 2, Low: 7, High: 9, End: 9}), captured, ""},
		{"below the low", cp, plan(51, 60, deleteCfg, nil), captured, "partition 1: checkpoint 50 is below the retained low 51"},
		{"past the high", cp, plan(0, 40, deleteCfg, nil), captured, "partition 1: checkpoint 50 is past the high watermark 40"},
		{"partition gone", cp, replay.Plan{Topic: "t", Partitions: []replay.PartitionBounds{{Partition: 0, High: 120, End: 120}}}, captured, "partition 1: the partition no longer exists"},
		{"compacted, fresh", cp, plan(0, 60, compact(hour), nil), captured.Add(59 * time.Minute), ""},
		{"compacted, too old", cp, plan(0, 60, compact(hour), nil), captured.Add(61 * time.Minute), "older than delete.retention.ms=3600000"},
		{"compacted, unknown age", checkpoint.Checkpoint{Topic: "t", EndMark: "high", Partitions: cp.Partitions}, plan(0, 60, compact(hour), nil), captured, "age is unknown"},
		{"compacted, retention unreadable", cp, plan(0, 60, map[string]string{"cleanup.policy": "compact"}, nil), captured, "cannot be read"},
		{"config denied", cp, plan(0, 60, nil, errors.New("TOPIC_AUTHORIZATION_FAILED")), captured, "DescribeConfigs ACL"},
		{"policy missing", cp, plan(0, 60, map[string]string{}, nil), captured, "did not answer cleanup.policy"},
		{"topic ID the same", withID(cp, idA), planID(plan(0, 60, deleteCfg, nil), idA), captured, ""},
		{"topic ID unknown in the checkpoint", cp, planID(plan(0, 60, deleteCfg, nil), idB), captured, ""},
		{"topic ID unknown in metadata", withID(cp, idA), plan(0, 60, deleteCfg, nil), captured, ""},
		{"topic recreated", withID(cp, idA), planID(plan(0, 60, deleteCfg, nil), idB), captured,
			"topic t was recreated: id AQAAAAAAAAAAAAAAAAAAAA, now AgAAAAAAAAAAAAAAAAAAAA"},
		// The ID is checked first: a recreated topic is named as such even
		// when its partitions also no longer fit.
		{"topic recreated and shorter", withID(cp, idA), planID(plan(0, 40, deleteCfg, nil), idB), captured, "was recreated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkContinues(OpUpdate, "tb", tc.cp, tc.plan, tc.now)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *StaleCheckpointError
			if !errors.As(err, &se) || !errors.Is(err, ErrStaleCheckpoint) {
				t.Fatalf("error %v, want a *StaleCheckpointError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q lacks %q", err, tc.want)
			}
		})
	}
}
