package client

import (
	"context"
	"slices"
	"sort"
	"sync"
)

// ClusterStatus is what Cluster.Tables says: each table across the
// daemons, and each daemon.
type ClusterStatus struct {
	Tables  []ClusterTable  `json:"tables"`
	Daemons []ClusterMember `json:"daemons"`
}

// ClusterMember is one daemon of the cluster as Tables found it.
type ClusterMember struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Ready is its /readyz: every configured table published.
	Ready bool `json:"ready"`
	// Error is why it did not answer ("" when it did).
	Error string `json:"error,omitempty"`
}

// ClusterTable is one table across the cluster.
type ClusterTable struct {
	Name  string `json:"name"`
	Topic string `json:"topic"`
	// Partitioner is the daemons' ("" when none says one); Conflict says
	// when they disagree, or the topic's partition counts they recorded
	// differ.
	Partitioner string `json:"partitioner,omitempty"`
	Conflict    string `json:"conflict,omitempty"`
	// PartitionsOfTopic is the topic's partition count the daemons
	// recorded (the highest; 0 when unknown).
	PartitionsOfTopic int32 `json:"partitions_of_topic"`
	// Partitions are 0 .. PartitionsOfTopic-1 (or those some daemon
	// holds, when the count is unknown), each with the daemons that hold
	// it.
	Partitions []ClusterPartition `json:"partitions"`
	// Holes are the partitions no ready daemon holds.
	Holes []int32 `json:"holes"`
	// FullyServed is true when every partition 0 .. PartitionsOfTopic-1 is
	// held by a ready daemon (and the daemons agree on the partitioner
	// and the count).
	FullyServed bool `json:"fully_served"`
	// Daemons are the daemons that have the table.
	Daemons []ClusterTableDaemon `json:"daemons"`
}

// ClusterPartition is one partition of a table and who holds it.
type ClusterPartition struct {
	Partition int32 `json:"partition"`
	// Ready are the ready daemons holding it; NotReady those that hold a
	// published generation of it but whose /readyz does not count the
	// table ready.
	Ready    []string `json:"ready"`
	NotReady []string `json:"not_ready,omitempty"`
}

// ClusterTableDaemon is one daemon's table.
type ClusterTableDaemon struct {
	Daemon string `json:"daemon"`
	State  string `json:"state"`
	// Generation is 0 while the daemon has not published the table.
	Generation        uint64  `json:"generation"`
	Subset            bool    `json:"subset"`
	PartitionSet      []int32 `json:"partition_set"`
	PartitionsOfTopic int32   `json:"partitions_of_topic"`
	// Repartitioned says the daemon saw the topic with another partition
	// count (LiveCount) than PartitionsOfTopic: it answers no key reads.
	Repartitioned bool  `json:"repartitioned,omitempty"`
	LiveCount     int32 `json:"live_partitions_of_topic,omitempty"`
	Ready         bool  `json:"ready"`
}

// Tables asks every daemon for its tables and its readiness (/readyz: a
// shard's speaks for its partitions only) and says, per table, which
// daemons hold which partitions and which partitions are holes.
func (c *Cluster) Tables(ctx context.Context) (ClusterStatus, error) {
	if err := c.Refresh(ctx); err != nil {
		return ClusterStatus{}, err
	}
	ready := make([]Readiness, len(c.members))
	rerrs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout)
			defer cancel()
			ready[i], rerrs[i] = m.cl.Readyz(actx)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return ClusterStatus{}, err
	}
	readyFor := func(m *member, table string) bool {
		i := slices.Index(c.members, m)
		if rerrs[i] != nil {
			return false
		}
		if ready[i].Ready {
			return true
		}
		return !slices.ContainsFunc(ready[i].Tables, func(t ReadyTable) bool { return t.Name == table })
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	var st ClusterStatus
	for i, m := range c.members {
		cm := ClusterMember{Name: m.name, Address: m.cl.Addr(), Ready: rerrs[i] == nil && ready[i].Ready}
		switch {
		case m.err != nil:
			cm.Error = m.err.Error()
		case rerrs[i] != nil:
			cm.Error = rerrs[i].Error()
		}
		st.Daemons = append(st.Daemons, cm)
	}
	names := make([]string, 0, len(c.routes))
	for n := range c.routes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st.Tables = append(st.Tables, c.tableStatusLocked(c.routes[n], readyFor))
	}
	return st, nil
}

func (c *Cluster) tableStatusLocked(r *route, readyFor func(*member, string) bool) ClusterTable {
	t := ClusterTable{Name: r.table, Topic: r.topic, Partitioner: string(r.partitioner), Conflict: r.conflict, PartitionsOfTopic: r.count,
		Holes: []int32{}}
	byPart := map[int32]*ClusterPartition{}
	part := func(p int32) *ClusterPartition {
		if byPart[p] == nil {
			byPart[p] = &ClusterPartition{Partition: p, Ready: []string{}}
		}
		return byPart[p]
	}
	for p := int32(0); p < r.count; p++ {
		part(p)
	}
	for _, h := range r.holders {
		ok := readyFor(h.m, r.table)
		d := ClusterTableDaemon{Daemon: h.m.name, State: h.t.State, Generation: h.t.Generation, PartitionSet: h.set, Ready: ok,
			PartitionsOfTopic: countOf(h.t, h.set)}
		if s := h.t.Shard; s != nil {
			d.Subset, d.Repartitioned, d.LiveCount = s.Subset, s.Repartitioned, s.LiveCount
		}
		if d.PartitionsOfTopic != 0 && r.count != 0 && d.PartitionsOfTopic != r.count && t.Conflict == "" {
			t.Conflict = "the daemons recorded different partition counts of the topic"
		}
		t.Daemons = append(t.Daemons, d)
		for _, p := range h.set {
			cp := part(p)
			if ok {
				cp.Ready = append(cp.Ready, h.m.name)
			} else {
				cp.NotReady = append(cp.NotReady, h.m.name)
			}
		}
	}
	for _, m := range r.building {
		t.Daemons = append(t.Daemons, ClusterTableDaemon{Daemon: m.name, State: StateBuilding, PartitionSet: []int32{}})
	}
	for _, cp := range byPart {
		t.Partitions = append(t.Partitions, *cp)
	}
	slices.SortFunc(t.Partitions, func(a, b ClusterPartition) int { return int(a.Partition - b.Partition) })
	for _, cp := range t.Partitions {
		if len(cp.Ready) == 0 {
			t.Holes = append(t.Holes, cp.Partition)
		}
	}
	t.FullyServed = r.count > 0 && len(t.Holes) == 0 && t.Conflict == ""
	return t
}
