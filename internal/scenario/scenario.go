// Package scenario owns the loading of the event scenarios under
// testdata/votes: it builds a scenario's topic on a broker and reports which
// records a read_committed reader can see, for the tests' own oracles.
package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kmaterialize/kmaterialize/internal/localkafka"
)

// Record is one record of a scenario step.
type Record struct {
	P     int32  `json:"p"`
	Value string `json:"value"`
}

// Step builds part of the log; exactly one field is set.
type Step struct {
	Produce       []Record `json:"produce,omitempty"`
	Txn           string   `json:"txn,omitempty"` // "commit" or "abort"
	Records       []Record `json:"records,omitempty"`
	DeleteRecords *struct {
		P      int32 `json:"p"`
		Before int64 `json:"before"`
	} `json:"delete_records,omitempty"`
}

// Scenario is testdata/votes/<name>.
type Scenario struct {
	Dir           string
	Topic         string   `json:"topic"`
	Partitions    int32    `json:"partitions"`
	IdentityField string   `json:"identity_field"`
	GroupField    string   `json:"group_field"`
	IgnoreFields  []string `json:"ignore_fields"`
	Steps         []Step   `json:"steps"`
	// Expected is expected.json: either Rows or Error.
	Expected struct {
		Rows  map[string]string `json:"rows"`
		Error string            `json:"error"`
	}
	CatalogPath string
}

// Visible is a record a read_committed reader sees after the scenario is
// built: committed and not deleted.
type Visible struct {
	Partition int32
	Offset    int64
	Value     []byte
}

// Load reads testdata/votes/<name> under root (the repository's testdata).
func Load(root, name string) (*Scenario, error) {
	dir := filepath.Join(root, "votes", name)
	s := &Scenario{Dir: dir, CatalogPath: filepath.Join(dir, "catalog.json")}
	if err := readJSON(filepath.Join(dir, "scenario.json"), s); err != nil {
		return nil, err
	}
	if err := readJSON(filepath.Join(dir, "expected.json"), &s.Expected); err != nil {
		return nil, err
	}
	return s, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Build creates the scenario's topic on b (named topic, or s.Topic when
// empty) and runs its steps, returning the visible records in partition and
// offset order.
func (s *Scenario) Build(ctx context.Context, b *localkafka.Broker, topic string) ([]Visible, error) {
	if topic == "" {
		topic = s.Topic
	}
	if err := b.CreateTopic(topic, s.Partitions, nil); err != nil {
		return nil, err
	}
	var vis []Visible
	add := func(recs []Record, offs []int64) {
		for i, r := range recs {
			vis = append(vis, Visible{Partition: r.P, Offset: offs[i], Value: []byte(r.Value)})
		}
	}
	for i, st := range s.Steps {
		switch {
		case st.Produce != nil:
			offs, err := b.Produce(ctx, topic, toLocal(st.Produce))
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", i, err)
			}
			add(st.Produce, offs)
		case st.Txn != "":
			offs, err := b.WriteTxn(ctx, topic, fmt.Sprintf("%s-step-%d", topic, i), toLocal(st.Records), st.Txn == "commit")
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", i, err)
			}
			if st.Txn == "commit" {
				add(st.Records, offs)
			}
		case st.DeleteRecords != nil:
			d := st.DeleteRecords
			if err := b.DeleteRecords(ctx, topic, d.P, d.Before); err != nil {
				return nil, fmt.Errorf("step %d: %w", i, err)
			}
			kept := vis[:0]
			for _, v := range vis {
				if v.Partition != d.P || v.Offset >= d.Before {
					kept = append(kept, v)
				}
			}
			vis = kept
		default:
			return nil, fmt.Errorf("%s: step %d does nothing", s.Dir, i)
		}
	}
	sortVisible(vis)
	return vis, nil
}

func toLocal(recs []Record) []localkafka.Record {
	out := make([]localkafka.Record, len(recs))
	for i, r := range recs {
		out[i] = localkafka.Record{Partition: r.P, Value: []byte(r.Value)}
	}
	return out
}

func sortVisible(v []Visible) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && less(v[j], v[j-1]); j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

func less(a, b Visible) bool {
	if a.Partition != b.Partition {
		return a.Partition < b.Partition
	}
	return a.Offset < b.Offset
}
