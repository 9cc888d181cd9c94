package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigExpansion: `brokers: ${KAFKA_BROKERS}` and `db:
// ${STATE_DIRECTORY}/...` (systemd's) are expanded from the environment, so
// a rebuild from the config reaches the broker and writes where the
// variable says; a ${ in a field that does not expand and an unset
// variable exit 2 naming the file's line (and the variable).
func TestConfigExpansion(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	topic := newTopic(t, 3)
	recs := produce(t, topic, genRecords(newRand(t), []int32{0, 1, 2}, 200))
	want, _, _ := oracle(recs, nil)
	t.Setenv("KM_TEST_BROKERS", broker.Addr)
	t.Setenv("KM_TEST_STATE", state)
	writeConfig := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := writeConfig("good.yaml", fmt.Sprintf(`db: ${KM_TEST_STATE}/tables.db
kafka:
  brokers: ${KM_TEST_BROKERS}
tables:
  - name: balances
    topic: %s
    stall_timeout: 20s
`, topic))
	mustCLI(t, 0, "rebuild", "--config", good, "--table", "balances")
	db := filepath.Join(state, "tables.db")
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("the database is not where ${KM_TEST_STATE} says: %v", err)
	}
	checkTable(t, want, scanTable(t, db, "balances"))

	for _, tc := range []struct {
		name, doc string
		line      int
		want      []string
	}{
		{"topic does not expand", "db: ${KM_TEST_STATE}/tables.db\nkafka:\n  brokers: ${KM_TEST_BROKERS}\ntables:\n  - name: balances\n    topic: ${KM_TEST_TOPIC}\n",
			6, []string{"tables[0].topic", "${KM_TEST_TOPIC}", "does not expand"}},
		{"unset variable", "db: ${KM_TEST_STATE}/tables.db\nkafka:\n  brokers: ${KM_TEST_UNSET_BROKERS}\ntables:\n  - {name: balances, topic: t}\n",
			3, []string{"kafka.brokers", "KM_TEST_UNSET_BROKERS is not set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.doc)
			r := mustCLI(t, exitUsage, "rebuild", "--config", path, "--table", "balances")
			for _, w := range append(tc.want, fmt.Sprintf("%s:%d:", path, tc.line)) {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
				}
			}
		})
	}
}
