package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// barLine is one partition's bar as the view draws it:
// "TOPIC pN [====] POSITION/END [RATE offsets/s] ETA|done|stopped" (the
// rate is left out once the bar is complete).
var barLine = regexp.MustCompile(`^(\S+) p(\d+)\s+\[[^\]]*\]\s+(\d+)/(\d+)(?:\s+\d+ offsets/s)?\s+(\S+)`)

type barState struct {
	position, end int64
	note          string // the ETA column: "done" once complete
}

// lastBars returns each partition's last drawn bar for topic in stderr,
// and fails on any line that is neither a bar nor a whole JSON log line
// (a log line drawn through the bars would be cut or glued to one).
func lastBars(t *testing.T, stderr, topic string) map[int32]barState {
	t.Helper()
	out := map[int32]barState{}
	for _, line := range strings.Split(stderr, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if m := barLine.FindStringSubmatch(line); m != nil {
			if m[1] != topic {
				continue
			}
			p, _ := strconv.ParseInt(m[2], 10, 32)
			pos, _ := strconv.ParseInt(m[3], 10, 64)
			end, _ := strconv.ParseInt(m[4], 10, 64)
			out[int32(p)] = barState{pos, end, m[5]}
			continue
		}
		var v map[string]any
		if jsonUnmarshal(line, &v) != nil {
			t.Fatalf("stderr line is neither a bar nor a JSON log line: %q\nstderr:\n%s", line, stderr)
		}
	}
	return out
}

// wantDone is every partition of marks at its mark, complete.
func wantDone(marks map[int32]int64) map[int32]barState {
	out := map[int32]barState{}
	for p, m := range marks {
		out[p] = barState{m, m, "done"}
	}
	return out
}

// TestRebuildProgressBars rebuilds a topic with --progress bars into a
// buffer (mpb draws frames one after the other there, at a fixed width)
// and checks the last frame: one bar per partition, each at the
// partition's high watermark as the broker reports it (an empty partition
// and one ending in a transaction marker included), complete; and the log
// lines, at debug level, whole between the frames.
func TestRebuildProgressBars(t *testing.T) {
	topic := newTopic(t, 4)
	rng := newRand(t)
	produce(t, topic, genRecords(rng, []int32{0, 1, 2}, 400))
	// Partition 2 ends in a commit marker; partition 3 stays empty.
	txn(t, topic, runName(t), []localkafka.Record{{Partition: 2, Key: []byte("t"), Value: []byte("v")}}, true)
	db := dbPath(t)
	// librdkafka's metadata debug lines are log lines of the rebuild's
	// own between the frames on any broker (on kfake a telemetry line came
	// unasked; Kafka without a metrics plugin sends none).
	res := mustCLI(t, 0, append([]string{"--log-format", "json", "--log-level", "debug"}, rebuildArgs(topic, db, "--progress", "bars", "-X", "debug=metadata")...)...)
	marks := partitionMarks(t, topic, false)
	if marks[3] != 0 || marks[2] == 0 {
		t.Fatalf("the topic's marks %v: want partition 3 empty and 2 not", marks)
	}
	if diff := cmp.Diff(wantDone(marks), lastBars(t, res.stderr, topic), cmp.AllowUnexported(barState{})); diff != "" {
		t.Fatalf("last bars (-broker's high watermarks +drawn):\n%s\nstderr:\n%s", diff, res.stderr)
	}
	if n := len(logLines(res.stderr)); n < 2 {
		t.Fatalf("%d log lines with the bars, want the rebuild's own", n)
	}
}

// TestCopyVerifyProgressLines copies and verifies with stderr not a
// terminal (the default --progress auto): each logs JSON progress lines,
// the last of which put every partition of each topic it read at its end
// as the broker reports it, and a summary line with the record count.
func TestCopyVerifyProgressLines(t *testing.T) {
	n := newCopyNames(t)
	src := copySource(t, n.src, 300)
	broker.TestTopic(t, n.dst, 3, nil)
	res := mustCLI(t, 0, n.copyArgs()...)
	srcMarks := partitionMarks(t, n.src, false)
	got := lastProgress(t, res.stderr)
	checkProgress(t, "copy", got, n.src, srcMarks, int64(countCommitted(src)))

	res = mustCLI(t, 0, append([]string{"--log-format", "json"}, n.verifyArgs()...)...)
	got = lastProgress(t, res.stderr)
	checkProgress(t, "verify (source)", got, n.src, srcMarks, int64(countCommitted(src)))
	// The destination holds each committed source record once, in
	// transactions of its own: its end is its high watermark.
	checkProgress(t, "verify (destination)", got, n.dst, partitionMarks(t, n.dst, false), int64(countCommitted(src)))
}

// topicProgress is what the progress lines said last about one topic.
type topicProgress struct {
	positions  map[int32][2]int64 // position, end
	records    int64
	done, half int
	summaries  int
}

// lastProgress folds the "progress" JSON lines of stderr: per topic, the
// last position and end of each partition and the last summary.
func lastProgress(t *testing.T, stderr string) map[string]*topicProgress {
	t.Helper()
	out := map[string]*topicProgress{}
	for _, l := range logLines(stderr) {
		if l["message"] != "progress" {
			continue
		}
		topic, _ := l["topic"].(string)
		tp := out[topic]
		if tp == nil {
			tp = &topicProgress{positions: map[int32][2]int64{}}
			out[topic] = tp
		}
		if p, ok := l["partition"].(float64); ok {
			tp.positions[int32(p)] = [2]int64{int64(l["position"].(float64)), int64(l["end"].(float64))}
			continue
		}
		tp.records = int64(l["records"].(float64))
		tp.done, tp.half = int(l["partitions_done"].(float64)), int(l["partitions"].(float64))
		tp.summaries++
	}
	return out
}

func checkProgress(t *testing.T, what string, got map[string]*topicProgress, topic string, marks map[int32]int64, records int64) {
	t.Helper()
	tp := got[topic]
	if tp == nil || tp.summaries == 0 {
		t.Fatalf("%s: no progress lines for %s (have %v)", what, topic, got)
	}
	want := map[int32][2]int64{}
	for p, m := range marks {
		want[p] = [2]int64{m, m}
	}
	if diff := cmp.Diff(want, tp.positions); diff != "" {
		t.Fatalf("%s: last progress of %s, (-broker's high watermarks +logged [position end]):\n%s", what, topic, diff)
	}
	if tp.records != records || tp.done != len(marks) || tp.half != len(marks) {
		t.Fatalf("%s: last summary of %s: %d records, %d/%d partitions done; want %d records, %d/%d",
			what, topic, tp.records, tp.done, tp.half, records, len(marks), len(marks))
	}
}

// TestCopyMaxRecordsBarsDone: a copy that stops cleanly at --max-records,
// short of the source's end, draws every bar done where it stopped (not
// stopped, which is for a failed or interrupted run), at most at the
// partition's end.
func TestCopyMaxRecordsBarsDone(t *testing.T) {
	n := newCopyNames(t)
	copySource(t, n.src, 300)
	broker.TestTopic(t, n.dst, 3, nil)
	res := mustCLI(t, 0, append([]string{"--log-format", "json"}, n.copyArgs("--max-records", "10", "--batch-records", "5", "--progress", "bars")...)...)
	marks := partitionMarks(t, n.src, false)
	bars := lastBars(t, res.stderr, n.src)
	if len(bars) == 0 {
		t.Fatalf("no bars drawn:\n%s", res.stderr)
	}
	short := false
	for p, b := range bars {
		if b.note != "done" || b.end != marks[p] || b.position > b.end {
			t.Errorf("partition %d: bar %+v, want done at or below its end %d", p, b, marks[p])
		}
		short = short || b.position < b.end
	}
	if !short {
		t.Fatalf("every bar reached its end with --max-records 10 of 300: the test proves nothing\n%s", res.stderr)
	}
	if sum := lastSummary(t, res.stdout); sum.Records != 10 || !sum.Committed {
		t.Fatalf("summary %+v, want 10 records committed", sum)
	}
}
