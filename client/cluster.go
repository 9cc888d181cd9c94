package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kmaterialize/kmaterialize/partition"
)

// This file is the cluster client: reads of tables that several daemons
// serve, as shards (each holds some of the topic's partitions) and
// replicas (several hold the same ones), routed from what the daemons say
// of themselves (GET /v1/tables: each table's api.Shard). docs/shards.md
// ("Cluster client") has the design; the rules are on the types.

// ClusterDaemon names one daemon of a cluster.
type ClusterDaemon struct {
	// Name is what messages call it; "" is its Address.
	Name string
	// Address is the daemon's unix socket path, or its TCP listener's URL
	// (http://HOST:PORT, https://...).
	Address string
	// Token is the bearer token sent to a TCP listener (its read_token,
	// or its admin_token); "" for a socket or an open loopback listener.
	Token string
}

// ClusterOptions tune a Cluster. The zero value (and nil) is the default
// of each field.
type ClusterOptions struct {
	// MaxAge is how long what the daemons said of their tables is used
	// before a read asks them again (default 30s). A failure (a daemon
	// unreachable, a 421 key_not_here) asks again at once.
	MaxAge time.Duration
	// CatchUpWait is how long a replica may wait to reach the positions
	// the cluster has already read at elsewhere (default 2s), when a read
	// moves to a replica not known to be there: past it the read moves to
	// the next replica. It never shortens the caller's GetOptions.Wait.
	CatchUpWait time.Duration
	// AttemptTimeout bounds one request to one daemon, beyond the wait it
	// asks for (default 10s): a daemon that hangs (a host gone without
	// refusing connections) costs this much before the next replica is
	// asked. The caller's context bounds the whole read.
	AttemptTimeout time.Duration
}

func (o *ClusterOptions) withDefaults() ClusterOptions {
	var out ClusterOptions
	if o != nil {
		out = *o
	}
	if out.MaxAge <= 0 {
		out.MaxAge = 30 * time.Second
	}
	if out.CatchUpWait <= 0 {
		out.CatchUpWait = 2 * time.Second
	}
	if out.AttemptTimeout <= 0 {
		out.AttemptTimeout = 10 * time.Second
	}
	return out
}

// Cluster reads tables across daemons. It learns which daemon holds which
// partitions of which table from their GET /v1/tables, on the first read,
// again once that is older than MaxAge, and at once after a failure; it
// runs no goroutine between calls. It is safe for concurrent use; Close
// releases its connections.
//
// # Routing
//
// A table's daemons are grouped by the partition set they hold: a group
// is a shard, its daemons replicas. A read goes to one replica, chosen in
// turn (round robin), and moves to the next when a replica cannot be
// reached, answers 503 or cannot reach the positions asked within the
// wait; any other answer of the API is the answer. Get of a table with a
// partitioner asks a daemon holding the key's partition; without one it
// asks each shard until one has the key (a subset table's 404 with
// HeaderPartial means "not here"). 409 repartitioned is returned, never
// routed around.
//
// # Positions
//
// Positions are per partition, so the caller's MinPositions are split by
// shard. The cluster keeps, per table, the highest positions its answers
// were read at; a read sent to a replica not known to have reached them
// asks for them as min_positions (waiting CatchUpWait), so that reads
// through one Cluster never go back in time, whichever replica answers.
// ForgetPositions drops them (after a table is rebuilt from scratch or
// rolled back on purpose).
type Cluster struct {
	members []*member
	opts    ClusterOptions
	turn    atomic.Uint64 // round robin among replicas

	refreshMu sync.Mutex // one refresh at a time

	mu      sync.Mutex
	routes  map[string]*route // by table name
	learned time.Time         // when routes were learned; zero: never
	epoch   uint64            // counts refreshes
	stale   bool              // a failure asks for a refresh
	seen    map[string]Positions
}

// member is one daemon of the cluster.
type member struct {
	name string
	cl   *Client
	// Guarded by Cluster.mu: the last refresh's error (nil: answered).
	err error
}

// route is one table as the cluster serves it.
type route struct {
	table string
	topic string
	// partitioner is the daemons' partitioner; conflict says they differ.
	partitioner partition.Partitioner
	conflict    string
	// count is the topic's partition count the daemons recorded (the
	// highest; 0: unknown).
	count    int32
	holders  []*holder // daemons with a published generation of the table
	shards   []*shard
	building []*member // daemons that have the table, never published
}

// shard is the holders of one partition set: replicas.
type shard struct {
	set      []int32
	replicas []*holder
}

// holder is one daemon's published table.
type holder struct {
	m     *member
	t     Table
	set   []int32
	shard *shard
	// Guarded by Cluster.mu: the positions the daemon was last seen at,
	// and whether it last failed to reach the positions asked.
	known   Positions
	lagging bool
}

func (h *holder) holds(p int32) bool {
	_, ok := slices.BinarySearch(h.set, p)
	return ok
}

// NewCluster returns a cluster of daemons (at least one; names and
// addresses unique). It connects on the first read.
func NewCluster(daemons []ClusterDaemon, o *ClusterOptions) (*Cluster, error) {
	if len(daemons) == 0 {
		return nil, errors.New("a cluster needs at least one daemon")
	}
	c := &Cluster{opts: o.withDefaults(), routes: map[string]*route{}, seen: map[string]Positions{}}
	names, addrs := map[string]bool{}, map[string]bool{}
	for i, d := range daemons {
		name := d.Name
		if name == "" {
			name = d.Address
		}
		if d.Address == "" {
			return nil, fmt.Errorf("daemon %d of the cluster has no address", i+1)
		}
		if names[name] || addrs[d.Address] {
			return nil, fmt.Errorf("daemon %q (%s) is named twice in the cluster", name, d.Address)
		}
		names[name], addrs[d.Address] = true, true
		var cl *Client
		if strings.Contains(d.Address, "://") {
			var err error
			if cl, err = DialURL(d.Address, d.Token); err != nil {
				return nil, fmt.Errorf("daemon %q: %w", name, err)
			}
		} else {
			if d.Token != "" {
				return nil, fmt.Errorf("daemon %q: a token applies to a TCP URL (http://HOST:PORT), not to the unix socket %s", name, d.Address)
			}
			cl = Dial(d.Address)
		}
		c.members = append(c.members, &member{name: name, cl: cl})
	}
	return c, nil
}

// Close closes the daemons' idle connections.
func (c *Cluster) Close() {
	for _, m := range c.members {
		m.cl.Close()
	}
}

// Refresh asks every daemon for its tables now. It fails only when no
// daemon answers; the daemons that did not are left out of the routing
// until a later refresh finds them.
func (c *Cluster) Refresh(ctx context.Context) error {
	c.mu.Lock()
	e := c.epoch
	c.mu.Unlock()
	return c.refresh(ctx, e)
}

// refresh learns the routes unless another refresh ended after epoch e.
func (c *Cluster) refresh(ctx context.Context, e uint64) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.mu.Lock()
	done := c.epoch > e
	c.mu.Unlock()
	if done {
		return nil
	}
	tables := make([][]Table, len(c.members))
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout)
			defer cancel()
			tables[i], errs[i] = m.cl.Tables(actx)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	answered := 0
	for i, m := range c.members {
		m.err = errs[i]
		if errs[i] == nil {
			answered++
		}
	}
	if answered == 0 {
		return fmt.Errorf("no daemon of the cluster answers: %w", errors.Join(memberErrors(c.members, errs)...))
	}
	c.routes = buildRoutes(c.members, tables, errs, c.routes)
	c.learned, c.stale = time.Now(), false
	c.epoch++
	return nil
}

func memberErrors(ms []*member, errs []error) []error {
	var out []error
	for i, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("%s: %w", ms[i].name, err))
		}
	}
	return out
}

// buildRoutes groups what the daemons said into routes, keeping the
// positions known of a daemon's table from the routes before.
func buildRoutes(ms []*member, tables [][]Table, errs []error, old map[string]*route) map[string]*route {
	routes := map[string]*route{}
	for i, m := range ms {
		if errs[i] != nil {
			continue
		}
		for _, t := range tables[i] {
			r := routes[t.Name]
			if r == nil {
				r = &route{table: t.Name, topic: t.Topic}
				routes[t.Name] = r
			}
			if t.Generation == 0 {
				r.building = append(r.building, m)
				continue
			}
			h := &holder{m: m, t: t, set: partitionSetOf(t), known: positionsOf(t)}
			if o := old[t.Name]; o != nil {
				for _, oh := range o.holders {
					if oh.m == m && oh.t.Generation == t.Generation {
						h.known = maxPositions(h.known, oh.known)
					}
				}
			}
			r.holders = append(r.holders, h)
			if s := t.Shard; s != nil && s.Partitioner != "" {
				p := partition.Partitioner(s.Partitioner)
				switch {
				case r.partitioner == "":
					r.partitioner = p
				case r.partitioner != p:
					r.conflict = fmt.Sprintf("the daemons disagree on the partitioner of table %q: %s says %s, another %s", t.Name, m.name, p, r.partitioner)
				}
			}
			r.count = max(r.count, countOf(t, h.set))
		}
	}
	for _, r := range routes {
		for _, h := range r.holders {
			var s *shard
			for _, x := range r.shards {
				if slices.Equal(x.set, h.set) {
					s = x
				}
			}
			if s == nil {
				s = &shard{set: h.set}
				r.shards = append(r.shards, s)
			}
			s.replicas = append(s.replicas, h)
			h.shard = s
		}
		slices.SortFunc(r.shards, func(a, b *shard) int { return slices.Compare(a.set, b.set) })
	}
	return routes
}

// partitionSetOf is the partitions t holds: its shard's set, or for a
// table whose daemon does not say, those of its checkpoint.
func partitionSetOf(t Table) []int32 {
	if t.Shard != nil && len(t.Shard.PartitionSet) > 0 {
		s := slices.Clone(t.Shard.PartitionSet)
		slices.Sort(s)
		return slices.Compact(s)
	}
	s := make([]int32, 0, len(t.Partitions))
	for _, p := range t.Partitions {
		s = append(s, p.Partition)
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// countOf is the topic's partition count t was built with: its shard's
// recorded count, or for a table over every partition, its set's extent.
func countOf(t Table, set []int32) int32 {
	if t.Shard != nil && t.Shard.PartitionsOfTopic > 0 {
		return t.Shard.PartitionsOfTopic
	}
	if (t.Shard == nil || !t.Shard.Subset) && len(set) > 0 {
		return set[len(set)-1] + 1
	}
	return 0
}

// positionsOf is t's positions: each partition's end.
func positionsOf(t Table) Positions {
	p := Positions{}
	for _, part := range t.Partitions {
		p[part.Partition] = part.End
	}
	return p
}

func maxPositions(a, b Positions) Positions {
	out := a.Clone()
	if out == nil {
		out = Positions{}
	}
	for p, v := range b {
		if v > out[p] {
			out[p] = v
		}
	}
	return out
}

// routeOf returns table's route, refreshing first when the routes are
// older than MaxAge, never learned, or a failure asked for it.
func (c *Cluster) routeOf(ctx context.Context, table string) (*route, error) {
	r, _, err := c.routeEpoch(ctx, table)
	return r, err
}

// routeEpoch is routeOf with the epoch of the routes it returns.
func (c *Cluster) routeEpoch(ctx context.Context, table string) (*route, uint64, error) {
	c.mu.Lock()
	need := c.learned.IsZero() || c.stale || time.Since(c.learned) > c.opts.MaxAge
	e := c.epoch
	c.mu.Unlock()
	if need {
		if err := c.refresh(ctx, e); err != nil {
			return nil, 0, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.routes[table]
	if r == nil || len(r.holders) == 0 {
		return nil, 0, c.noTableLocked(table, r)
	}
	return r, c.epoch, nil
}

// noTableLocked is the error of a read of a table no reachable daemon
// serves.
func (c *Cluster) noTableLocked(table string, r *route) error {
	var down []string
	for _, m := range c.members {
		if m.err != nil {
			down = append(down, m.name)
		}
	}
	switch {
	case r != nil:
		return &Error{Method: http.MethodGet, Path: tablePath(table, ""), Status: http.StatusServiceUnavailable, Code: CodeTableNotReady,
			Message: fmt.Sprintf("no daemon of the cluster has published table %q yet (building on %s)", table, memberNames(r.building))}
	case len(down) > 0:
		return &UnservedError{Table: table, Reason: fmt.Sprintf("no daemon that answers has table %q; %s did not answer", table, strings.Join(down, ", "))}
	}
	return &Error{Method: http.MethodGet, Path: tablePath(table, ""), Status: http.StatusNotFound, Code: CodeTableNotFound,
		Message: fmt.Sprintf("no daemon of the cluster has table %q", table)}
}

func memberNames(ms []*member) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.name
	}
	return strings.Join(s, ", ")
}

// ErrUnserved is matched by an *UnservedError.
var ErrUnserved = errors.New("not served by the cluster")

// UnservedError is a read the cluster cannot answer: no daemon that
// answers holds the partitions it needs (a hole), or every replica that
// does failed. Partitions are those partitions; Causes what each daemon
// asked answered.
type UnservedError struct {
	Table      string
	Partitions []int32
	Reason     string
	Causes     []error
}

func (e *UnservedError) Error() string {
	msg := fmt.Sprintf("table %q: %s", e.Table, e.Reason)
	if len(e.Causes) > 0 {
		msg += ": " + errors.Join(e.Causes...).Error()
	}
	return strings.ReplaceAll(msg, "\n", "; ")
}

func (e *UnservedError) Unwrap() []error { return append([]error{ErrUnserved}, e.Causes...) }

// DaemonError is the answer of one daemon of the cluster that is the
// answer of a read (an *Error: 404, 409 repartitioned, 400, ...): it names
// the daemon, and unwraps to the answer.
type DaemonError struct {
	Daemon string // its name
	Addr   string // its socket path or URL
	Err    error
}

func (e *DaemonError) Error() string { return fmt.Sprintf("daemon %s: %v", e.Daemon, e.Err) }

func (e *DaemonError) Unwrap() error { return e.Err }

// order returns the replicas in the order to ask them: in turn from a
// rotating start, those that last failed to reach the positions asked
// after the others.
func (c *Cluster) order(reps []*holder) []*holder {
	if len(reps) == 0 {
		return nil
	}
	start := int(c.turn.Add(1) % uint64(len(reps)))
	out := append(slices.Clone(reps[start:]), reps[:start]...)
	c.mu.Lock()
	defer c.mu.Unlock()
	slices.SortStableFunc(out, func(a, b *holder) int {
		switch {
		case a.lagging == b.lagging:
			return 0
		case a.lagging:
			return 1
		}
		return -1
	})
	return out
}

// readOptions are the options of a read at h: the caller's MinPositions of
// h's partitions, raised to the positions the cluster has read table at
// where h is not known to have reached them (catchUp then says so, and
// the wait is at least CatchUpWait).
func (c *Cluster) readOptions(table string, h *holder, o GetOptions) (out GetOptions, catchUp bool) {
	out.Wait = o.Wait
	m := map[int32]int64{}
	for p, n := range o.MinPositions {
		if h.holds(p) {
			m[p] = n
		}
	}
	c.mu.Lock()
	for p, n := range c.seen[table] {
		if h.holds(p) && n > m[p] && n > h.known[p] {
			m[p], catchUp = n, true
		}
	}
	c.mu.Unlock()
	if len(m) > 0 {
		out.MinPositions = m
	}
	if catchUp && out.Wait < c.opts.CatchUpWait {
		out.Wait = c.opts.CatchUpWait
	}
	if len(m) == 0 {
		out.Wait = 0
	}
	return out, catchUp
}

// observed records that h answered a read of table at ri (seen: the
// caller saw it, so later reads must not go back before it).
func (c *Cluster) observed(table string, h *holder, p Positions, seen bool) {
	if len(p) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h.known = maxPositions(h.known, p)
	if seen {
		h.lagging = false
		c.seen[table] = maxPositions(c.seen[table], p)
	}
}

// Positions returns the highest positions the cluster's answers of table
// were read at, per partition (nil: none yet): what its reads will not go
// back before.
func (c *Cluster) Positions(table string) Positions {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[table].Clone()
}

// ForgetPositions drops the positions kept of table: later reads may be
// answered at lower ones (after a rebuild from scratch or a rollback,
// which go back on purpose).
func (c *Cluster) ForgetPositions(table string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, table)
}

// failed marks the routes stale after a daemon did not answer.
func (c *Cluster) failed() {
	c.mu.Lock()
	c.stale = true
	c.mu.Unlock()
}

// moveOn reports whether err, the outcome of one replica, lets the read
// move to the next replica: no answer of the API at all (unreachable, the
// connection cut), a 503, or the positions not reached in time. Any other
// answer of the API is the answer.
func moveOn(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var e *Error
	if !errors.As(err, &e) {
		return true
	}
	return e.Status == http.StatusServiceUnavailable || e.Code == CodePositionsNotReached
}

// keyAnswer is what a key read's error answer says beyond its *Error.
type keyAnswer struct {
	partial bool   // a 404 with HeaderPartial: "not in my partitions"
	notHere *int32 // a 421 key_not_here: the key's partition
}

// getAt reads key from h: GetWith's request, with the shard's parts of
// the answer (HeaderPartial, a 421's partition).
func (c *Cluster) getAt(ctx context.Context, h *holder, table string, key []byte, o GetOptions) (Value, keyAnswer, error) {
	var ka keyAnswer
	path := tablePath(table, "/keys/"+escapeSegment(string(key)))
	q := url.Values{}
	method, body, err := o.request(q)
	if err != nil {
		return Value{}, ka, err
	}
	actx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout+o.Wait)
	defer cancel()
	resp, err := h.m.cl.sendBody(actx, method, path, q, body)
	if err != nil {
		return Value{}, ka, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		e := responseError(method, path, resp)
		ka.partial = e.Partial
		if e.Code == CodeKeyNotHere {
			p := e.Partition
			ka.notHere = &p
		}
		return Value{}, ka, positionsError(e, o.MinPositions)
	}
	if _, err := generation(resp); err != nil {
		return Value{}, ka, fmt.Errorf("%s %s: %w", method, path, err)
	}
	v := Value{ReadInfo: readInfo(resp)}
	if v.Value, err = io.ReadAll(resp.Body); err != nil {
		return Value{}, ka, fmt.Errorf("%s %s: read the value: %w", method, path, err)
	}
	return v, ka, nil
}

// ClusterValue is the answer of Cluster.Get: the value, what it was read
// at, and which daemon answered.
type ClusterValue struct {
	Value
	// Daemon is the name of the daemon that answered.
	Daemon string
}

// Get returns the value of key in table (see Cluster for the routing). A
// key no shard holds is an *Error of CodeKeyNotFound (in a *DaemonError
// when one daemon's answer says so); a key whose partition no daemon that
// answers holds is an *UnservedError; 409 repartitioned is the daemon's
// *Error, in a *DaemonError. o.MinPositions are split by shard.
func (c *Cluster) Get(ctx context.Context, table string, key []byte, o GetOptions) (ClusterValue, error) {
	if err := o.validate(); err != nil {
		return ClusterValue{}, err
	}
	r, e, err := c.routeEpoch(ctx, table)
	if err != nil {
		return ClusterValue{}, err
	}
	if r.conflict != "" {
		return ClusterValue{}, &UnservedError{Table: table, Reason: r.conflict}
	}
	if r.partitioner == "" || r.count == 0 {
		return c.getEachShard(ctx, r, key, o)
	}
	p, err := r.partitioner.Partition(key, r.count)
	if err != nil {
		// A key the partitioner does not place (an empty key under
		// consistent): only asking every shard can find it.
		return c.getEachShard(ctx, r, key, o)
	}
	v, ka, err := c.getPartition(ctx, r, p, key, o)
	if ka.notHere == nil {
		return v, err
	}
	// 421: the daemon's table does not hold the key's partition, though
	// the routes said it does: they are stale. Learn them again and ask,
	// once, a holder of the partition the daemon named.
	if rerr := c.refresh(ctx, e); rerr != nil {
		return ClusterValue{}, errors.Join(err, rerr)
	}
	if r, err = c.routeOf(ctx, table); err != nil {
		return ClusterValue{}, err
	}
	v, _, err = c.getPartition(ctx, r, *ka.notHere, key, o)
	return v, err
}

// getPartition asks the replicas that hold partition p, in turn.
func (c *Cluster) getPartition(ctx context.Context, r *route, p int32, key []byte, o GetOptions) (ClusterValue, keyAnswer, error) {
	var reps []*holder
	for _, h := range r.holders {
		if h.holds(p) {
			reps = append(reps, h)
		}
	}
	if len(reps) == 0 {
		return ClusterValue{}, keyAnswer{}, &UnservedError{Table: r.table, Partitions: []int32{p},
			Reason: fmt.Sprintf("no daemon that answers holds partition %d, the key's (%s of %d partitions)", p, r.partitioner, r.count)}
	}
	v, ka, _, err := c.getReplicas(ctx, r, reps, key, o)
	return v, ka, err
}

// getReplicas asks reps in turn until one answers. answered is false when
// none did (the error is then an *UnservedError).
func (c *Cluster) getReplicas(ctx context.Context, r *route, reps []*holder, key []byte, o GetOptions) (ClusterValue, keyAnswer, bool, error) {
	var causes []error
	for _, h := range c.order(reps) {
		ro, catchUp := c.readOptions(r.table, h, o)
		v, ka, err := c.getAt(ctx, h, r.table, key, ro)
		if moveOn(ctx, err) {
			causes = append(causes, fmt.Errorf("%s: %w", h.m.name, err))
			c.noteMiss(r.table, h, err, catchUp)
			continue
		}
		if err != nil {
			var ae *Error
			if errors.As(err, &ae) && ae.Code == CodeKeyNotFound {
				c.observed(r.table, h, ae.Read.Positions, true)
			}
			return ClusterValue{}, ka, true, c.daemonError(h, err)
		}
		c.observed(r.table, h, v.Positions, true)
		return ClusterValue{Value: v, Daemon: h.m.name}, ka, true, nil
	}
	if err := ctx.Err(); err != nil {
		return ClusterValue{}, keyAnswer{}, false, err
	}
	return ClusterValue{}, keyAnswer{}, false, &UnservedError{Table: r.table, Partitions: reps[0].set,
		Reason: fmt.Sprintf("no replica of partitions %s answered", partition.FormatSet(reps[0].set)), Causes: causes}
}

// getEachShard asks one replica of each shard until one has the key. A
// 404 is "not here" when the daemon says its answer is partial, and the
// answer when its table holds every partition.
func (c *Cluster) getEachShard(ctx context.Context, r *route, key []byte, o GetOptions) (ClusterValue, error) {
	var notFound error
	var unserved []error
	var missed []int32
	for _, s := range c.cover(r) {
		v, ka, answered, err := c.getReplicas(ctx, r, s.replicas, key, o)
		switch {
		case !answered && ctx.Err() == nil:
			unserved = append(unserved, err)
			missed = append(missed, s.set...)
			continue
		case IsCode(err, CodeKeyNotFound) && (ka.partial || s.replicas[0].t.Shard != nil && s.replicas[0].t.Shard.Subset):
			notFound = err
			continue
		}
		return v, err
	}
	holes := c.holes(r)
	if len(unserved) > 0 || len(holes) > 0 {
		missed = append(missed, holes...)
		slices.Sort(missed)
		return ClusterValue{}, &UnservedError{Table: r.table, Partitions: slices.Compact(missed), Causes: unserved,
			Reason: fmt.Sprintf("the key is in none of the partitions that answered, and partitions %s did not (no partitioner: every shard is asked)", partition.FormatSet(missed))}
	}
	if notFound == nil {
		notFound = &Error{Method: http.MethodGet, Path: tablePath(r.table, "/keys/"+escapeSegment(string(key))), Status: http.StatusNotFound,
			Code: CodeKeyNotFound, Message: fmt.Sprintf("key %q not found in table %q on any shard", key, r.table)}
	}
	return ClusterValue{}, notFound
}

// cover returns shards of r whose partition sets do not overlap and
// together hold every partition any shard holds, when they can: larger
// sets first. A partition held only by shards that overlap those taken is
// covered by none (the caller sees a hole).
func (c *Cluster) cover(r *route) []*shard {
	ss := slices.Clone(r.shards)
	slices.SortStableFunc(ss, func(a, b *shard) int { return len(b.set) - len(a.set) })
	taken := map[int32]bool{}
	var out []*shard
	for _, s := range ss {
		if slices.ContainsFunc(s.set, func(p int32) bool { return taken[p] }) {
			continue
		}
		for _, p := range s.set {
			taken[p] = true
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *shard) int { return slices.Compare(a.set, b.set) })
	return out
}

// holes are the partitions 0..count-1 of r's topic that no shard of its
// cover holds (none when the count is unknown).
func (c *Cluster) holes(r *route) []int32 {
	held := map[int32]bool{}
	for _, s := range c.cover(r) {
		for _, p := range s.set {
			held[p] = true
		}
	}
	var out []int32
	for p := int32(0); p < r.count; p++ {
		if !held[p] {
			out = append(out, p)
		}
	}
	return out
}

// servedFully refuses a read of every row when a partition of the table
// is held by no shard of its cover.
func (c *Cluster) servedFully(r *route) error {
	if r.conflict != "" {
		return &UnservedError{Table: r.table, Reason: r.conflict}
	}
	if h := c.holes(r); len(h) > 0 {
		return &UnservedError{Table: r.table, Partitions: h,
			Reason: fmt.Sprintf("partitions %s of %d are held by no daemon that answers (or only by shards that overlap others)", partition.FormatSet(h), r.count)}
	}
	return nil
}

// Count returns the number of rows of table in the range o selects, summed
// over its shards (each counted by one replica, read at its own
// positions). A partition no daemon holds is an *UnservedError.
func (c *Cluster) Count(ctx context.Context, table string, o CountOptions) (int64, error) {
	r, err := c.routeOf(ctx, table)
	if err != nil {
		return 0, err
	}
	if err := c.servedFully(r); err != nil {
		return 0, err
	}
	var total int64
	for _, s := range c.cover(r) {
		n, err := c.countShard(ctx, r, s, o)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func (c *Cluster) countShard(ctx context.Context, r *route, s *shard, o CountOptions) (int64, error) {
	var causes []error
	for _, h := range c.order(s.replicas) {
		ro, catchUp := c.readOptions(r.table, h, GetOptions{MinPositions: o.MinPositions, Wait: o.Wait})
		co := o
		co.MinPositions, co.Wait = ro.MinPositions, ro.Wait
		actx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout+co.Wait)
		n, ri, err := h.m.cl.CountWith(actx, r.table, co)
		cancel()
		if moveOn(ctx, err) {
			causes = append(causes, fmt.Errorf("%s: %w", h.m.name, err))
			c.noteMiss(r.table, h, err, catchUp)
			continue
		}
		if err != nil {
			return 0, c.daemonError(h, err)
		}
		c.observed(r.table, h, ri.Positions, true)
		return n, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return 0, &UnservedError{Table: r.table, Partitions: s.set,
		Reason: fmt.Sprintf("no replica of partitions %s answered", partition.FormatSet(s.set)), Causes: causes}
}

// noteMiss records why h did not answer: behind the positions asked (the
// positions it is at), or not at all (the routes are stale).
func (c *Cluster) noteMiss(table string, h *holder, err error, catchUp bool) {
	var pe *PositionsNotReachedError
	if errors.As(err, &pe) {
		c.observed(table, h, pe.Positions, false)
		if catchUp {
			c.mu.Lock()
			h.lagging = true
			c.mu.Unlock()
		}
		return
	}
	c.failed()
}

func (c *Cluster) daemonError(h *holder, err error) error {
	var ae *Error
	if errors.As(err, &ae) {
		return &DaemonError{Daemon: h.m.name, Addr: h.m.cl.Addr(), Err: err}
	}
	return err
}
