// A table's partitions (the shards of docs/shards.md) and its producers'
// partitioner, as the file writes them.

package config

import (
	"errors"
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/kmaterialize/kmaterialize/decode"
	"github.com/kmaterialize/kmaterialize/materialize"
	"github.com/kmaterialize/kmaterialize/partition"
)

// filePartitions is a table's partitions: as written: a string in
// partition.ParseSet's syntax ("0-5", "0,2,4"; a lone number is one
// partition) or a YAML list of partition numbers ([0, 2, 4]). Checking the
// numbers is left to the table (tablePartitions), which can name it.
type filePartitions struct {
	Given  bool    // the field is there (null is not given)
	Text   string  // the string form, literal (a ${ is refused)
	List   []int64 // the list form, when IsList
	IsList bool
}

// UnmarshalYAML takes the field's node (never null: the decoder leaves a
// null field alone). Its errors quote nothing of the document; the shape
// walk (yamltree.go) reports them at the field's line.
func (f *filePartitions) UnmarshalYAML(n *yaml.Node) error {
	const want = `want a partition set ("0-5", "0,2,4") or a list of partition numbers ([0, 2, 4])`
	switch n.Kind {
	case yaml.ScalarNode:
		*f = filePartitions{Given: true, Text: n.Value}
		return nil
	case yaml.SequenceNode:
		out := filePartitions{Given: true, IsList: true, List: make([]int64, 0, len(n.Content))}
		for i, e := range n.Content {
			var v int64
			if e.Decode(&v) != nil {
				return fmt.Errorf("item %d is %s, not a partition number: %s", i, nodeKind(e), want)
			}
			out.List = append(out.List, v)
		}
		*f = out
		return nil
	}
	return fmt.Errorf("cannot unmarshal %s into partitions: %s", nodeKind(n), want)
}

// tablePartitions reads the table's partitions: into s.Partitions (sorted,
// without duplicates) and partitioner: into s.Partitioner (its canonical
// name). s.KeyFormat is already read: a partitioner needs raw keys.
func tablePartitions(s *materialize.Spec, ft fileTable, bad func(key, format string, args ...any) error) error {
	if f := ft.Partitions; f.Given {
		var ps []int32
		var err error
		written := fmt.Sprintf("%q", f.Text)
		if f.IsList {
			written = fmt.Sprint(f.List)
			ps, err = partitionList(f.List)
		} else {
			ps, err = partition.ParseSet(f.Text)
		}
		if err != nil {
			return withCause(bad("partitions", "table %q: %s: %v", s.Name, written, err), err)
		}
		s.Partitions = ps
	}
	if ft.Partitioner != "" {
		p, err := partition.Parse(ft.Partitioner)
		if err != nil {
			return withCause(bad("partitioner", "table %q: %v", s.Name, err), err)
		}
		if kf := s.KeyFormat; kf != "" && kf != decode.Raw {
			return bad("partitioner", "table %q: partitioner %s with key_format %s: producers hash the serialized key bytes, "+
				"and a table that decodes its keys stores them as canonical JSON, so a key's partition cannot be computed; "+
				"use key_format raw, or leave partitioner out (docs/shards.md)", s.Name, ft.Partitioner, kf)
		}
		s.Partitioner = string(p)
	}
	return nil
}

// partitionList checks the list form of partitions: as ParseSet checks its
// string form (no partition twice, none negative or above
// partition.MaxSetPartition, not empty), returning it sorted.
func partitionList(list []int64) ([]int32, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("%w: an empty list (leave partitions out for all of the topic's partitions)", partition.ErrBadSet)
	}
	out := make([]int32, 0, len(list))
	seen := make(map[int64]bool, len(list))
	for _, v := range list {
		switch {
		case v < 0:
			return nil, fmt.Errorf("%w: partition %d is negative", partition.ErrBadSet, v)
		case v > partition.MaxSetPartition:
			return nil, fmt.Errorf("%w: partition %d is above %d", partition.ErrBadSet, v, partition.MaxSetPartition)
		case seen[v]:
			return nil, fmt.Errorf("%w: partition %d is named twice", partition.ErrBadSet, v)
		}
		seen[v] = true
		out = append(out, int32(v))
	}
	slices.Sort(out)
	return out, nil
}

// withCause sets cause as the *Error e's cause, so that it matches
// partition.ErrBadSet or partition.ErrUnknownPartitioner too.
func withCause(e, cause error) error {
	var ce *Error
	if errors.As(e, &ce) {
		ce.Err = cause
	}
	return e
}
