package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/kmaterialize/kmaterialize/partition"
)

// Rows calls fn with each row of table in key order, merged from one
// replica of each shard (a k-way merge of the shards' pages). Each shard's
// pages come from the one replica that answered its first page, pinned to
// that page's generation, for a page's "after" and generation are that
// daemon's: a replica that fails mid-scan fails the scan (an *Error of
// CodeGenerationGone when a publish replaced the generation: start over),
// while one that fails on the first page hands the shard to the next
// replica. Shards are read at their own positions (o.MinPositions split by
// shard, each shard's first page held until it reaches them), so the rows
// are no one snapshot across shards. A partition no daemon that answers
// holds is an *UnservedError before any row; a key two shards hold (a
// topic whose producers do not place a key in one partition) is an error
// when the merge meets it. o.Generation must be 0 (generations are one
// daemon's); o.OnPage is called with every page of every shard.
func (c *Cluster) Rows(ctx context.Context, table string, o RowsOptions, fn func(Row) error) error {
	if o.Generation != 0 {
		return errors.New("RowsOptions.Generation: a cluster's shards and replicas have generations of their own; leave it 0")
	}
	if err := (GetOptions{MinPositions: o.MinPositions, Wait: o.Wait}).validate(); err != nil {
		return err
	}
	r, err := c.routeOf(ctx, table)
	if err != nil {
		return err
	}
	if err := c.servedFully(r); err != nil {
		return err
	}
	var streams []*shardStream
	for _, s := range c.cover(r) {
		st := &shardStream{c: c, r: r, s: s, o: o}
		if err := st.open(ctx); err != nil {
			return err
		}
		streams = append(streams, st)
	}
	n := 0
	for o.Limit <= 0 || n < o.Limit {
		var next *shardStream
		for _, st := range streams {
			if !st.ok() {
				continue
			}
			if next != nil {
				switch cmp := bytes.Compare(st.head().Key, next.head().Key); {
				case cmp == 0:
					return fmt.Errorf("table %q: key %q is held by the shard of partitions %s and by that of %s: its producers do not place a key in one partition, so the shards cannot be merged",
						table, st.head().Key, partition.FormatSet(next.s.set), partition.FormatSet(st.s.set))
				case cmp > 0:
					continue
				}
			}
			next = st
		}
		if next == nil {
			return nil
		}
		if err := fn(next.head()); err != nil {
			return err
		}
		n++
		if err := next.advance(ctx, o.Limit-n); err != nil {
			return err
		}
	}
	return nil
}

// shardStream is one shard's rows, a page at a time, from one replica.
type shardStream struct {
	c *Cluster
	r *route
	s *shard
	o RowsOptions

	h     *holder // the replica, once its first page answered
	gen   uint64
	rows  []Row
	i     int
	more  bool
	after []byte
}

func (st *shardStream) ok() bool  { return st.i < len(st.rows) }
func (st *shardStream) head() Row { return st.rows[st.i] }
func (st *shardStream) limit(left int) int {
	l := min(st.o.PageSize, MaxPageSize)
	if l <= 0 {
		l = DefaultPageSize
	}
	if st.o.Limit > 0 && left > 0 && left < l {
		l = left
	}
	return l
}

// open reads the shard's first page from the first replica that answers.
func (st *shardStream) open(ctx context.Context) error {
	var causes []error
	for _, h := range st.c.order(st.s.replicas) {
		ro, catchUp := st.c.readOptions(st.r.table, h, GetOptions{MinPositions: st.o.MinPositions, Wait: st.o.Wait})
		err := st.page(ctx, h, ro, st.limit(st.o.Limit))
		if moveOn(ctx, err) {
			causes = append(causes, fmt.Errorf("%s: %w", h.m.name, err))
			st.c.noteMiss(st.r.table, h, err, catchUp)
			continue
		}
		if err != nil {
			return st.c.daemonError(h, err)
		}
		st.h = h
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return &UnservedError{Table: st.r.table, Partitions: st.s.set,
		Reason: fmt.Sprintf("no replica of partitions %s answered", partition.FormatSet(st.s.set)), Causes: causes}
}

// advance moves past the head row, reading the next page (of the same
// replica and generation) when the page is used up; left is how many rows
// the scan may still return (<= 0 with a limit: none).
func (st *shardStream) advance(ctx context.Context, left int) error {
	st.i++
	if st.ok() || !st.more || (st.o.Limit > 0 && left <= 0) {
		return nil
	}
	if err := st.page(ctx, st.h, GetOptions{}, st.limit(left)); err != nil {
		return st.c.daemonError(st.h, err)
	}
	return nil
}

// page reads one page from h into st.rows.
func (st *shardStream) page(ctx context.Context, h *holder, ro GetOptions, limit int) error {
	o := st.o
	q := url.Values{}
	for name, v := range map[string][]byte{"prefix": o.Prefix, "from": o.From, "to": o.To} {
		if len(v) > 0 {
			q.Set(name, string(v))
		}
	}
	if o.KeysOnly {
		q.Set("keys_only", "1")
	}
	if st.after != nil {
		q.Set("after", string(st.after))
	}
	if st.gen != 0 {
		q.Set("generation", strconv.FormatUint(st.gen, 10))
	}
	if o.Base64 {
		q.Set("encoding", "base64")
	}
	q.Set("limit", strconv.Itoa(limit))
	method, body := http.MethodGet, []byte(nil)
	if st.after == nil {
		var err error
		if method, body, err = ro.request(q); err != nil {
			return err
		}
	}
	po := o
	po.OnPage = func(ri ReadInfo) {
		st.c.observed(st.r.table, h, ri.Positions, true)
		if o.OnPage != nil {
			o.OnPage(ri)
		}
	}
	actx, cancel := context.WithTimeout(ctx, st.c.opts.AttemptTimeout+ro.Wait)
	defer cancel()
	var rows []Row
	more, last, _, gen, err := h.m.cl.rowsPage(actx, method, tablePath(st.r.table, "/rows"), q, body, po,
		func(r Row) error { rows = append(rows, r); return nil })
	if err != nil {
		return positionsError(err, ro.MinPositions)
	}
	if st.gen == 0 {
		st.gen = gen
	}
	st.rows, st.i, st.more = rows, 0, more && len(rows) > 0
	if len(rows) > 0 {
		st.after = last
	}
	return nil
}
