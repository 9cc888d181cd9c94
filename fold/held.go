package fold

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"slices"
)

// held is the latest fold's rows in memory: the last record of each key,
// copied into large byte chunks and found through an open-addressing index
// of plain integers. Nothing in it is a Go pointer per row, so the garbage
// collector never scans it row by row, and its size in bytes is what the
// budget counts: a row costs its key and value, a 12-byte header and the
// index slot and sort entry (heldOverhead). An update overwrites the value
// in place when it fits the space of the key's entry (so a key updated with
// values of the same size costs nothing more), and otherwise costs a new
// entry (the old one stays in the chunk until reset).
type held struct {
	chunks [][]byte // entries: header (key length, value length or tombLen, value space), key, value
	cur    int      // the chunk being filled
	slots  []slot   // len is a power of two; chunk 0 means empty
	n      int      // keys in slots
	bytes  int      // bytes accounted to the budget
	seed   maphash.Seed
	// touched is what putAll's look-ahead loads add up to, stored so that
	// the compiler keeps them.
	touched uint32
}

// slot is one index entry: where the key's latest entry is, and 32 bits of
// the key's hash, which place the slot (its low bits) and skip most key
// comparisons (the rest), so that growing the index needs no rehashing.
type slot struct {
	hash  uint32
	chunk uint32 // chunk index + 1; 0: empty
	off   uint32
}

const (
	heldChunk  = 1 << 20
	entryHdr   = 12
	tombLen    = ^uint32(0)
	minSlots   = 1 << 10
	maxLoadNum = 1 // grow when n/len(slots) exceeds maxLoadNum/maxLoadDen
	maxLoadDen = 2
)

// heldOverhead is the per-key bookkeeping counted against the budget: the
// entry header, two index slots (the index is at most half full) and the
// sort entry of a spill and its radix sort's second buffer.
const heldOverhead = entryHdr + 2*12 + 2*24 // header, slots, sortEntry x2

func newHeld() *held { return &held{seed: maphash.MakeSeed()} }

// put records value (nil: a tombstone) as key's latest.
func (h *held) put(key, value []byte) {
	if len(h.slots) == 0 {
		h.slots = make([]slot, minSlots)
	}
	h.putHashed(key, value, h.hash(key))
}

// putHashed is put with the key's hash already taken (h.hash).
func (h *held) putHashed(key, value []byte, hv uint32) {
	i, found := h.find(key, hv)
	if found && h.overwrite(h.slots[i], value) {
		return
	}
	chunk, off := h.append(key, value)
	if found {
		h.slots[i].chunk, h.slots[i].off = chunk, off
		h.bytes += entryHdr + len(key) + len(value)
		return
	}
	h.slots[i] = slot{hash: hv, chunk: chunk, off: off}
	h.n++
	h.bytes += len(key) + len(value) + heldOverhead
	if h.n*maxLoadDen > len(h.slots)*maxLoadNum {
		h.grow()
	}
}

// touchGroup is how many records putAll looks up ahead of putting them.
const touchGroup = 16

// putAll puts the records' keys and values, in order, as put does, but
// looks up a group of them before it puts any: their slots, then the
// entries those slots point to, each pass loads that do not depend on
// one another, so that the processor waits for their cache misses
// together instead of one after the other. A fold of a large table
// misses twice a record, on the index and on the key's entry; grouped,
// the puts find both in the cache (BenchmarkLatestFoldHeld). skip reports
// the records not to put.
func (h *held) putAll(recs []Record, skip func(*Record) bool) {
	if len(h.slots) == 0 {
		h.slots = make([]slot, minSlots)
	}
	var hvs [touchGroup]uint32
	var put [touchGroup]bool
	for len(recs) > 0 {
		g := recs[:min(len(recs), touchGroup)]
		recs = recs[len(g):]
		mask := len(h.slots) - 1
		var acc uint32
		for j := range g {
			if put[j] = !skip(&g[j]); put[j] {
				hvs[j] = h.hash(g[j].Key)
				acc ^= h.slots[int(hvs[j])&mask].off
			}
		}
		for j := range g {
			if !put[j] {
				continue
			}
			if s := h.slots[int(hvs[j])&mask]; s.chunk != 0 && s.hash == hvs[j] {
				acc ^= uint32(h.chunks[s.chunk-1][s.off])
			}
		}
		h.touched ^= acc // keeps the loads
		for j := range g {
			if put[j] {
				h.putHashed(g[j].Key, g[j].Value, hvs[j])
			}
		}
	}
}

// get returns key's value (nil: a tombstone) and whether key is held. The
// value is valid until the next put or reset.
func (h *held) get(key []byte) ([]byte, bool) {
	if h.n == 0 {
		return nil, false
	}
	i, found := h.find(key, h.hash(key))
	if !found {
		return nil, false
	}
	_, v := h.entry(h.slots[i].chunk, h.slots[i].off)
	return v, true
}

// overwrite puts value into the entry at s if it fits the entry's value
// space.
func (h *held) overwrite(s slot, value []byte) bool {
	c := h.chunks[s.chunk-1][s.off:]
	kl := binary.LittleEndian.Uint32(c)
	space := binary.LittleEndian.Uint32(c[8:])
	if uint32(len(value)) > space {
		return false
	}
	vl := uint32(len(value))
	if value == nil {
		vl = tombLen
	}
	binary.LittleEndian.PutUint32(c[4:], vl)
	copy(c[entryHdr+kl:], value)
	return true
}

func (h *held) hash(key []byte) uint32 {
	hv := maphash.Bytes(h.seed, key)
	return uint32(hv>>32) ^ uint32(hv)
}

// find returns the slot of key, or the empty slot where it would go.
func (h *held) find(key []byte, hv uint32) (int, bool) {
	mask := len(h.slots) - 1
	for i := int(hv) & mask; ; i = (i + 1) & mask {
		s := h.slots[i]
		if s.chunk == 0 {
			return i, false
		}
		if s.hash == hv {
			if k, _ := h.entry(s.chunk, s.off); bytes.Equal(k, key) {
				return i, true
			}
		}
	}
}

func (h *held) grow() {
	old := h.slots
	h.slots = make([]slot, 2*len(old))
	mask := len(h.slots) - 1
	for _, s := range old {
		if s.chunk == 0 {
			continue
		}
		i := int(s.hash) & mask
		for h.slots[i].chunk != 0 {
			i = (i + 1) & mask
		}
		h.slots[i] = s
	}
}

// append copies an entry into the chunks.
func (h *held) append(key, value []byte) (chunk, off uint32) {
	need := entryHdr + len(key) + len(value)
	for {
		if h.cur == len(h.chunks) {
			h.chunks = append(h.chunks, make([]byte, 0, max(heldChunk, need)))
		}
		c := h.chunks[h.cur]
		if cap(c)-len(c) >= need {
			off = uint32(len(c))
			vl := uint32(len(value))
			if value == nil {
				vl = tombLen
			}
			c = binary.LittleEndian.AppendUint32(c, uint32(len(key)))
			c = binary.LittleEndian.AppendUint32(c, vl)
			c = binary.LittleEndian.AppendUint32(c, uint32(len(value)))
			c = append(c, key...)
			c = append(c, value...)
			h.chunks[h.cur] = c
			return uint32(h.cur + 1), off
		}
		if len(c) == 0 {
			// An empty chunk kept by reset is too small for this entry.
			h.chunks[h.cur] = make([]byte, 0, need)
			continue
		}
		h.cur++
	}
}

// entry returns the key and value (nil: a tombstone) at chunk, off.
func (h *held) entry(chunk, off uint32) (key, value []byte) {
	c := h.chunks[chunk-1][off:]
	kl := binary.LittleEndian.Uint32(c)
	vl := binary.LittleEndian.Uint32(c[4:])
	key = c[entryHdr : entryHdr+kl : entryHdr+kl]
	if vl == tombLen {
		return key, nil
	}
	v := c[entryHdr+kl:]
	return key, v[:vl:vl]
}

// reset forgets every row, keeping the memory for reuse.
func (h *held) reset() {
	for i := range h.chunks {
		h.chunks[i] = h.chunks[i][:0]
	}
	h.cur = 0
	clear(h.slots)
	h.n, h.bytes = 0, 0
}

// sortEntry is a row in a spill's sort: the key's first 16 bytes, big
// endian, decide most comparisons without touching the chunks (keys are
// often short, or share a prefix of a few bytes).
type sortEntry struct {
	p0, p1 uint64
	chunk  uint32
	off    uint32
}

func keyPrefix(k []byte) (uint64, uint64) {
	var b [16]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// sorted returns the rows' entries in ascending key order: a radix sort
// on the keys' 16-byte prefixes (one pass per byte that is not the same in
// every key: keys that share a prefix or are short need few), then a
// comparison sort of the full keys among entries with the same prefix.
func (h *held) sorted() []sortEntry {
	es := make([]sortEntry, 0, h.n)
	for _, s := range h.slots {
		if s.chunk != 0 {
			k, _ := h.entry(s.chunk, s.off)
			p0, p1 := keyPrefix(k)
			es = append(es, sortEntry{p0: p0, p1: p1, chunk: s.chunk, off: s.off})
		}
	}
	if len(es) < 256 {
		slices.SortFunc(es, h.compare)
		return es
	}
	es = radixSort(es, make([]sortEntry, len(es)))
	// Ties on the prefix: keys longer than 16 bytes that share it, or a
	// short key and the same key followed by zero bytes.
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].p0 == es[i].p0 && es[j].p1 == es[i].p1 {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(es[i:j], h.compare)
		}
		i = j
	}
	return es
}

func (h *held) compare(a, b sortEntry) int {
	if c := cmp.Compare(a.p0, b.p0); c != 0 {
		return c
	}
	if c := cmp.Compare(a.p1, b.p1); c != 0 {
		return c
	}
	ka, _ := h.entry(a.chunk, a.off)
	kb, _ := h.entry(b.chunk, b.off)
	return bytes.Compare(ka, kb)
}

// radixSort sorts es by (p0, p1), least significant byte first, using tmp
// (as long as es) as the other buffer, and returns the sorted slice (es or
// tmp). Bytes that are the same in every entry are skipped.
func radixSort(es, tmp []sortEntry) []sortEntry {
	var diff0, diff1 uint64
	for _, e := range es {
		diff0 |= e.p0 ^ es[0].p0
		diff1 |= e.p1 ^ es[0].p1
	}
	src, dst := es, tmp
	for pass := range 16 {
		diff := diff1
		shift := uint(8 * (pass % 8))
		if pass >= 8 {
			diff = diff0
		}
		if (diff>>shift)&0xff == 0 {
			continue
		}
		var count [256]int
		for i := range src {
			count[radixByte(&src[i], pass, shift)]++
		}
		sum := 0
		for b := range count {
			count[b], sum = sum, sum+count[b]
		}
		for i := range src {
			b := radixByte(&src[i], pass, shift)
			dst[count[b]] = src[i]
			count[b]++
		}
		src, dst = dst, src
	}
	return src
}

func radixByte(e *sortEntry, pass int, shift uint) byte {
	if pass < 8 {
		return byte(e.p1 >> shift)
	}
	return byte(e.p0 >> shift)
}
