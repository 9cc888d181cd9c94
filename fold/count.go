package fold

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// CountConfig configures a "count" fold. IdentityField and GroupField are
// required; the zero value of every other field means "none".
type CountConfig struct {
	// Topic is used in error messages only.
	Topic string
	// IdentityField names the top-level field whose value identifies one
	// logical event (e.g. "event_id"). Required.
	IdentityField string
	// GroupField names the top-level field whose value is the row the event
	// counts toward (e.g. "booth"). Required; it may not be ignored.
	GroupField string
	// IgnoreFields are top-level envelope fields (e.g. "sent_at") left out
	// when comparing the contents of records with the same identity. Risk:
	// a field ignored here can differ between retries without being noticed.
	IgnoreFields []string
	// Catalog lists groups that always appear as rows, with 0 when no event
	// counts toward them. Nil means no catalog: rows are only the groups seen.
	// A non-nil catalog also limits the groups accepted (see
	// AllowUnknownGroups); an empty, non-nil catalog accepts none.
	Catalog []string
	// AllowUnknownGroups accepts groups outside a non-nil Catalog; by
	// default such a record is a *DataError.
	AllowUnknownGroups bool
	// OnBadRecord says what to do with a record Fold cannot count (see
	// "Data errors" on Count). Default FailOnBadRecord.
	OnBadRecord OnBadRecord
}

// Count is the identity-deduplicated "count" fold. Each record value is a
// JSON object; records with the same identity (the value of
// CountConfig.IdentityField) are one logical event, counted once toward its
// group (the value of CountConfig.GroupField). The table's rows are
// group -> decimal count, written by Finish.
//
// # Duplicates and conflicts
//
// Producers retry, so one event can appear several times, in the same or in
// different partitions. Records with the same identity and the same content
// are duplicates and count once. Content is the record value's canonical JSON
// (object keys sorted, numbers by decimal value, strings by value) with
// CountConfig.IgnoreFields removed at top level. Records with the same
// identity and different contents are a conflict: Fold keeps going and
// Finish returns a *ConflictError, which is the same whatever order the
// partitions were read in.
//
// # Data errors
//
// Fold returns a *DataError, at once, for a record whose value is null, not
// JSON, or not an object; that lacks the identity or the group field; whose
// identity or group is not a string or a number (a number counts by its
// canonical text, so 17 and 17.0 are the same identity), or is empty; or
// whose group is outside a non-nil catalog unless AllowUnknownGroups; or
// whose identity or group is over MaxKeySize (the identity is a key of the
// on-disk index, the group a row key). With SkipBadRecords, such a record
// is counted in Stats.SkippedByReason (ReasonUndecodable,
// ReasonUnknownGroup, ReasonKeyTooLarge) instead, and counts toward nothing.
//
// # Memory
//
// The identity index is on disk, in t.Index("identity"): identity ->
// one 44-byte entry per distinct content (sha256 of the canonical content,
// then the lowest position seen with that content: partition as 4 bytes and
// offset as 8 bytes, big-endian). Only group counts, the smallest conflicting
// identity and counters are in memory, so memory does not grow with the
// number of identities.
//
// # Sorting externally
//
// A rebuild does not fold into the on-disk index record by record (random
// inserts into a tree that spans every identity): it calls SortExternally,
// and Fold then keeps the identities in memory, up to a byte budget
// (held.go); the caller spills them as sorted runs (Full, Sorted, Reset)
// and at the end merges the runs and the held identities into the index in
// identity order, calling CombineIdentities once per identity with all of
// its runs' entries. The counts, the duplicates and the conflicts are
// counted during that merge, and Finish then writes the rows. The index is
// the same as a record-by-record fold's, so later increments read it alike.
//
// A Count is not safe for concurrent use.
type Count struct {
	cfg     CountConfig
	ignore  []string
	catalog map[string]bool // nil without a catalog
	counts  map[string]int64
	skips   skips

	records, logical, duplicates, conflicts int64
	minConflict                             []byte // smallest conflicting identity; nil if none

	content []byte         // reused canonical-content buffer
	entries []byte         // reused copy of an index value
	flat    flatEvent      // the fast path of a record
	obj     map[string]any // the general path's object, until its content is appended

	// Sorting externally (SortExternally): held maps an identity to its
	// entries with their groups (heldEntryLen each); groups are numbered
	// in gids.
	held           *held
	budget         int
	groups         []string
	gids           map[string]uint32
	folded, pairs  int64    // records held; distinct (identity, content) pairs merged
	first, second  Position // of minConflict, found by the merge
	merged, outBuf []byte   // CombineIdentities' buffers
	combined       bool     // CombineIdentities has run
}

// IdentityIndex is the name of Count's on-disk identity index, the
// fold-private namespace (Table.Index) a caller merges its sorted runs into
// (SortExternally).
const IdentityIndex = "identity"

const identityIndex = IdentityIndex

const (
	hashLen  = sha256.Size
	entryLen = hashLen + 4 + 8
	// heldEntryLen is an entry as held in memory and in runs: the index's
	// entry and the content's group number (4 bytes), since the content
	// includes the group.
	heldEntryLen = entryLen + 4
)

// NewCount returns a "count" fold for cfg. It returns an error when a
// required field is missing, a catalog name is empty or repeated, or the
// group field is among the ignored fields.
func NewCount(cfg CountConfig) (*Count, error) {
	if cfg.IdentityField == "" {
		return nil, errors.New("count fold: the identity field is required")
	}
	if cfg.GroupField == "" {
		return nil, errors.New("count fold: the group field is required")
	}
	ignore := slices.Clone(cfg.IgnoreFields)
	slices.Sort(ignore)
	ignore = slices.Compact(ignore)
	if slices.Contains(ignore, cfg.GroupField) {
		return nil, fmt.Errorf("count fold: the group field %q cannot be ignored", cfg.GroupField)
	}
	c := &Count{ignore: ignore, counts: make(map[string]int64), skips: skips{on: cfg.OnBadRecord}}
	if cfg.Catalog != nil {
		c.catalog = make(map[string]bool, len(cfg.Catalog))
		for _, g := range cfg.Catalog {
			if g == "" {
				return nil, errors.New("count fold: the catalog has an empty group name")
			}
			if c.catalog[g] {
				return nil, fmt.Errorf("count fold: the catalog names group %q twice", g)
			}
			if len(g) > MaxKeySize {
				return nil, fmt.Errorf("count fold: the catalog has a group name of %d bytes, over the %d-byte key limit", len(g), MaxKeySize)
			}
			c.catalog[g] = true
		}
	}
	cfg.IgnoreFields = slices.Clone(cfg.IgnoreFields)
	cfg.Catalog = slices.Clone(cfg.Catalog)
	c.cfg = cfg
	return c, nil
}

// ParseCatalog reads a catalog of group names: a JSON array of strings (in
// its order), or a JSON object whose keys are the names (sorted; the values
// are ignored). Names must be non-empty and, in an array, distinct. "[]" and
// "{}" give an empty, non-nil catalog.
func ParseCatalog(data []byte) ([]string, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, fmt.Errorf("catalog is not JSON: %w", err)
	}
	var names []string
	switch v := v.(type) {
	case []any:
		names = make([]string, 0, len(v))
		seen := make(map[string]bool, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("catalog entry %d is a JSON %s, not a string", i, jsonType(e))
			}
			if seen[s] {
				return nil, fmt.Errorf("catalog names %q twice", s)
			}
			seen[s] = true
			names = append(names, s)
		}
	case map[string]any:
		names = make([]string, 0, len(v))
		for k := range v {
			names = append(names, k)
		}
		slices.Sort(names)
	default:
		return nil, fmt.Errorf("catalog is a JSON %s; want an array of group names or an object whose keys are the names", jsonType(v))
	}
	for i, s := range names {
		if s == "" {
			return nil, fmt.Errorf("catalog entry %d is an empty name", i)
		}
	}
	return names, nil
}

// Name returns "count".
func (c *Count) Name() string { return "count" }

// Params returns identity_field, group_field, ignore_fields (sorted, comma
// joined), allow_unknown_groups ("true"/"false") and, when there is a
// catalog, catalog_size.
func (c *Count) Params() map[string]string {
	p := map[string]string{
		"identity_field":       c.cfg.IdentityField,
		"group_field":          c.cfg.GroupField,
		"ignore_fields":        strings.Join(c.ignore, ","),
		"allow_unknown_groups": strconv.FormatBool(c.cfg.AllowUnknownGroups),
	}
	if c.catalog != nil {
		p["catalog_size"] = strconv.Itoa(len(c.catalog))
	}
	return p
}

// SortExternally switches c to sorting externally (see "Sorting
// externally" on Count): Fold keeps the identities in memory and never
// uses its Table (which may be nil); budget bounds the bytes held before
// Full reports true. Call it before the first Fold.
func (c *Count) SortExternally(budget int) {
	c.held = newHeld()
	c.budget = budget
	c.gids = make(map[string]uint32)
}

// Full reports whether the identities held reach the budget given to
// SortExternally.
func (c *Count) Full() bool { return c.held.bytes >= c.budget }

// Sorted returns the held identities in ascending order, each with its
// entries as CombineIdentities reads them. They stay held until Reset; do
// not call Fold while reading them.
func (c *Count) Sorted() *SortedRows { return &SortedRows{es: c.held.sorted(), held: c.held} }

// Reset forgets the held identities, after the caller has stored them.
func (c *Count) Reset() { c.held.reset() }

// CombineIdentities is the merge's combine of one identity (in ascending
// identity order, once per identity): values are its entries from each
// run and from Sorted, oldest first. It returns the identity's index
// entry (a content seen in several runs once, at its lowest position) and
// counts the identity: a logical event toward the group of its lowest
// position, duplicates, and a conflict when it has two contents. The
// result is valid until the next call.
func (c *Count) CombineIdentities(identity []byte, values [][]byte) ([]byte, error) {
	c.combined = true
	m := c.merged[:0]
	for _, v := range values {
		if len(v) == 0 || len(v)%heldEntryLen != 0 {
			return nil, fmt.Errorf("count fold: held entry for identity %q has %d bytes, not a multiple of %d", identity, len(v), heldEntryLen)
		}
	next:
		for e := 0; e < len(v); e += heldEntryLen {
			for o := 0; o < len(m); o += heldEntryLen {
				if bytes.Equal(m[o:o+hashLen], v[e:e+hashLen]) {
					if entryPos(v[e:]).Compare(entryPos(m[o:])) < 0 {
						copy(m[o:o+heldEntryLen], v[e:e+heldEntryLen])
					}
					continue next
				}
			}
			m = append(m, v[e:e+heldEntryLen]...)
		}
	}
	c.merged = m
	contents := len(m) / heldEntryLen
	c.pairs += int64(contents)
	c.logical++
	low := 0
	for o := heldEntryLen; o < len(m); o += heldEntryLen {
		if entryPos(m[o:]).Compare(entryPos(m[low:])) < 0 {
			low = o
		}
	}
	c.counts[c.groups[binary.BigEndian.Uint32(m[low+entryLen:])]]++
	if contents > 1 {
		c.conflicts++
		if c.minConflict == nil { // the merge goes in identity order: the first is the smallest
			c.minConflict = bytes.Clone(identity)
			second := -1
			for o := 0; o < len(m); o += heldEntryLen {
				if o != low && (second < 0 || entryPos(m[o:]).Compare(entryPos(m[second:])) < 0) {
					second = o
				}
			}
			c.first, c.second = entryPos(m[low:]), entryPos(m[second:])
		}
	}
	out := c.outBuf[:0]
	for o := 0; o < len(m); o += heldEntryLen {
		out = append(out, m[o:o+entryLen]...)
	}
	c.outBuf = out
	return out, nil
}

// hold records one checked record's identity in memory (SortExternally).
func (c *Count) hold(key, group []byte, sum *[hashLen]byte, pos Position) {
	gid, ok := c.gids[string(group)]
	if !ok {
		gid = uint32(len(c.groups))
		c.groups = append(c.groups, string(group))
		c.gids[string(group)] = gid
	}
	c.folded++
	old, found := c.held.get(key)
	if !found {
		c.entries = appendHeldEntry(c.entries[:0], sum[:], pos, gid)
		c.held.put(key, c.entries)
		return
	}
	// old is only valid until the next put: work on a copy.
	c.entries = append(c.entries[:0], old...)
	for e := 0; e < len(c.entries); e += heldEntryLen {
		if !bytes.Equal(c.entries[e:e+hashLen], sum[:]) {
			continue
		}
		if pos.Compare(entryPos(c.entries[e:])) < 0 {
			putEntryPos(c.entries[e:], pos)
			c.held.put(key, c.entries)
		}
		return
	}
	c.entries = appendHeldEntry(c.entries, sum[:], pos, gid)
	c.held.put(key, c.entries)
}

func appendHeldEntry(b, sum []byte, p Position, gid uint32) []byte {
	return binary.BigEndian.AppendUint32(appendEntry(b, sum, p), gid)
}

// Fold reads each record of batch, checks it, and records its identity in
// the on-disk index (or, sorting externally, in memory). It returns a
// *DataError at the first record it cannot fold, and a wrapped Table error
// if the index cannot be read or written; conflicts are reported by
// Finish.
func (c *Count) Fold(t Table, batch []Record) error {
	if len(batch) == 0 {
		return nil
	}
	var idx KV
	if c.held == nil {
		var err error
		if idx, err = t.Index(identityIndex); err != nil {
			return fmt.Errorf("count fold: open the identity index: %w", err)
		}
	}
	for i := range batch {
		c.records++
		err := c.fold(idx, &batch[i])
		var de *DataError
		if errors.As(err, &de) {
			err = c.skips.bad(de)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decode is the general path of fold (flatEvent is the fast one): it
// decodes any JSON value, and returns the identity and group texts, or a
// *DataError (without position: fold adds it). It leaves the object in
// c.obj and no content: fold appends it after its own checks.
func (c *Count) decode(value []byte) (identity, group, content []byte, err error) {
	dataErr := func(reason string, err error) error {
		return &DataError{Kind: ReasonUndecodable, Reason: reason, Err: err}
	}
	v, err := decodeJSON(value)
	if err != nil {
		return nil, nil, nil, dataErr("value is not JSON", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, nil, dataErr(fmt.Sprintf("value is a JSON %s, not an object", jsonType(v)), nil)
	}
	id, err := fieldText(obj, c.cfg.IdentityField)
	if err != nil {
		return nil, nil, nil, dataErr(err.Error(), nil)
	}
	g, err := fieldText(obj, c.cfg.GroupField)
	if err != nil {
		return nil, nil, nil, dataErr(err.Error(), nil)
	}
	c.obj = obj
	return []byte(id), []byte(g), nil, nil
}

// fold counts one record. A *DataError it returns has changed nothing:
// every check comes before the first index write.
func (c *Count) fold(idx KV, r *Record) error {
	kind := ReasonUndecodable
	dataErr := func(reason string, err error) error {
		return &DataError{Topic: c.cfg.Topic, Partition: r.Partition, Offset: r.Offset, Kind: kind, Reason: reason, Err: err}
	}
	if r.Value == nil {
		return dataErr("value is null", nil)
	}
	identity, group, content, ok := c.flat.parse(r.Value, c.cfg.IdentityField, c.cfg.GroupField, c.ignore, c.content[:0])
	if !ok {
		var err error
		if identity, group, content, err = c.decode(r.Value); err != nil {
			var de *DataError
			if errors.As(err, &de) {
				de.Topic, de.Partition, de.Offset = c.cfg.Topic, r.Partition, r.Offset
			}
			return err
		}
	}
	if content != nil {
		c.content = content
	}
	if len(identity) > MaxKeySize || len(group) > MaxKeySize {
		kind = ReasonKeyTooLarge
		if len(identity) > MaxKeySize {
			return dataErr(keyTooLarge(fmt.Sprintf("field %q", c.cfg.IdentityField), len(identity)), nil)
		}
		return dataErr(keyTooLarge(fmt.Sprintf("field %q", c.cfg.GroupField), len(group)), nil)
	}
	if c.catalog != nil && !c.catalog[string(group)] && !c.cfg.AllowUnknownGroups {
		kind = ReasonUnknownGroup
		return dataErr(fmt.Sprintf("group %q is not in the catalog (use --allow-unknown-groups to accept it)", group), nil)
	}
	if content == nil {
		// The general path defers the content to here: an unreadable
		// number is reported after the checks above.
		var err error
		if c.content, err = appendObject(c.content[:0], c.obj, c.ignore); err != nil {
			kind = ReasonUndecodable
			return dataErr("value has an unreadable number", err)
		}
	}
	sum := sha256.Sum256(c.content)
	pos := Position{r.Partition, r.Offset}
	key := identity
	if c.held != nil {
		c.hold(key, group, &sum, pos)
		return nil
	}

	old, err := idx.Get(key)
	if err != nil {
		return fmt.Errorf("count fold: read identity %q from the index: %w", identity, err)
	}
	if old == nil {
		// A new logical event.
		c.entries = appendEntry(c.entries[:0], sum[:], pos)
		if err := idx.Put(key, c.entries); err != nil {
			return fmt.Errorf("count fold: write identity %q to the index: %w", identity, err)
		}
		c.logical++
		c.counts[string(group)]++
		return nil
	}
	if len(old) == 0 || len(old)%entryLen != 0 {
		return fmt.Errorf("count fold: identity index entry for %q has %d bytes, not a multiple of %d", identity, len(old), entryLen)
	}
	// old is only valid until the next write: work on a copy.
	c.entries = append(c.entries[:0], old...)
	for e := 0; e < len(c.entries); e += entryLen {
		if !bytes.Equal(c.entries[e:e+hashLen], sum[:]) {
			continue
		}
		// A physical duplicate; keep the lowest position of its content.
		c.duplicates++
		if pos.Compare(entryPos(c.entries[e:])) < 0 {
			putEntryPos(c.entries[e:], pos)
			if err := idx.Put(key, c.entries); err != nil {
				return fmt.Errorf("count fold: write identity %q to the index: %w", identity, err)
			}
		}
		return nil
	}
	// A content not seen before for this identity: a conflict.
	if len(c.entries) == entryLen {
		c.conflicts++
		if c.minConflict == nil || bytes.Compare(key, c.minConflict) < 0 {
			c.minConflict = bytes.Clone(key) // key is the record's bytes
		}
	}
	c.entries = appendEntry(c.entries, sum[:], pos)
	if err := idx.Put(key, c.entries); err != nil {
		return fmt.Errorf("count fold: write identity %q to the index: %w", identity, err)
	}
	return nil
}

// Finish returns a *ConflictError if any identity had two contents, and
// otherwise writes one row per group: every catalog group and every group
// seen, in ascending order, with its count as a decimal string.
//
// Sorting externally, Finish comes after the merge (CombineIdentities), and
// refuses to run before it while identities were held.
func (c *Count) Finish(t Table) error {
	if c.held != nil {
		if c.folded > 0 && !c.combined {
			return errors.New("count fold: Finish before the held identities were merged (CombineIdentities)")
		}
		if c.minConflict != nil {
			return &ConflictError{Topic: c.cfg.Topic, Field: c.cfg.IdentityField, Identity: string(c.minConflict),
				First: c.first, Second: c.second, Identities: c.conflicts}
		}
	}
	if c.minConflict != nil {
		return c.conflictError(t)
	}
	groups := make([]string, 0, len(c.counts)+len(c.catalog))
	for g := range c.catalog {
		groups = append(groups, g)
	}
	for g := range c.counts {
		if !c.catalog[g] {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	var buf []byte
	for _, g := range groups {
		buf = strconv.AppendInt(buf[:0], c.counts[g], 10)
		if err := t.Put([]byte(g), buf); err != nil {
			return fmt.Errorf("count fold: write the row for group %q: %w", g, err)
		}
	}
	return nil
}

// conflictError builds the *ConflictError for the smallest conflicting
// identity from its index entry: First is its lowest position overall, and
// Second the lowest position among its other contents.
func (c *Count) conflictError(t Table) error {
	idx, err := t.Index(identityIndex)
	if err != nil {
		return fmt.Errorf("count fold: open the identity index: %w", err)
	}
	v, err := idx.Get(c.minConflict)
	if err != nil {
		return fmt.Errorf("count fold: read identity %q from the index: %w", c.minConflict, err)
	}
	if len(v) < 2*entryLen || len(v)%entryLen != 0 {
		return fmt.Errorf("count fold: identity index entry for conflicting %q has %d bytes, want at least two %d-byte entries", c.minConflict, len(v), entryLen)
	}
	first := 0
	for e := entryLen; e < len(v); e += entryLen {
		if entryPos(v[e:]).Compare(entryPos(v[first:])) < 0 {
			first = e
		}
	}
	second := -1
	for e := 0; e < len(v); e += entryLen {
		if e != first && (second < 0 || entryPos(v[e:]).Compare(entryPos(v[second:])) < 0) {
			second = e
		}
	}
	return &ConflictError{
		Topic:      c.cfg.Topic,
		Field:      c.cfg.IdentityField,
		Identity:   string(c.minConflict),
		First:      entryPos(v[first:]),
		Second:     entryPos(v[second:]),
		Identities: c.conflicts,
	}
}

// Stats reports Records, Skipped and SkippedByReason (bad records skipped
// with SkipBadRecords; otherwise every record counts or is an error) and
// Extra "logical_events" (distinct identities),
// "duplicates_folded" (records whose identity and content were already seen)
// and "conflicts" (identities with more than one content). None of them
// depend on the order partitions are read in.
func (c *Count) Stats() Stats {
	if c.held != nil {
		// Every record held is a new pair or a duplicate of one.
		c.duplicates = c.folded - c.pairs
	}
	return Stats{
		Records:         c.records,
		Skipped:         c.skips.total,
		SkippedByReason: c.skips.reasons(),
		Extra: map[string]int64{
			"logical_events":    c.logical,
			"duplicates_folded": c.duplicates,
			"conflicts":         c.conflicts,
		},
	}
}

// Empty reports whether no record counted toward any group: the table
// then has only the catalog's groups, all 0.
func (c *Count) Empty() bool { return c.logical == 0 }

var _ Folder = (*Count)(nil)
var _ EmptyReporter = (*Count)(nil)

func appendEntry(b, sum []byte, p Position) []byte {
	b = append(b, sum...)
	b = binary.BigEndian.AppendUint32(b, uint32(p.Partition))
	return binary.BigEndian.AppendUint64(b, uint64(p.Offset))
}

func entryPos(e []byte) Position {
	return Position{
		Partition: int32(binary.BigEndian.Uint32(e[hashLen:])),
		Offset:    int64(binary.BigEndian.Uint64(e[hashLen+4:])),
	}
}

func putEntryPos(e []byte, p Position) {
	binary.BigEndian.PutUint32(e[hashLen:], uint32(p.Partition))
	binary.BigEndian.PutUint64(e[hashLen+4:], uint64(p.Offset))
}

// fieldText returns the text of top-level field name of obj: a string as is,
// a number as its canonical text. Anything else, or an empty text, is an
// error that reads as a DataError reason.
func fieldText(obj map[string]any, name string) (string, error) {
	v, ok := obj[name]
	if !ok {
		return "", fmt.Errorf("field %q is missing", name)
	}
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		n, err := canonicalNumber(string(v))
		if err != nil {
			return "", fmt.Errorf("field %q: %v", name, err)
		}
		s = n
	default:
		return "", fmt.Errorf("field %q is a JSON %s, not a string or number", name, jsonType(v))
	}
	if s == "" {
		return "", fmt.Errorf("field %q is empty", name)
	}
	return s, nil
}

// jsonType names the JSON type of a value as decodeJSON returns it.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
