package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
)

// The parts of bbolt's on-disk layout (go.etcd.io/bbolt v1.4.3,
// internal/common/page.go and meta.go) that preflight reads. bbolt writes
// them in the machine's byte order; every platform this builds for is
// little-endian.
//
// A page starts with a 16-byte header: id uint64, flags uint16, count
// uint16, overflow uint32. Pages 0 and 1 are meta pages, the header followed
// by: magic uint32, version uint32, pageSize uint32, flags uint32, root
// bucket (root pgid uint64, sequence uint64), freelist pgid uint64, pgid
// (the high-water mark: pages in use) uint64, txid uint64, and checksum
// uint64, an FNV-64a of the meta fields before it.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	boltPageHeader  = 16
	boltMetaFlag    = 0x04
	boltMetaLen     = 64 // meta fields, checksum included
	boltMetaSummed  = 56 // bytes covered by the checksum
	boltNoFreelist  = ^uint64(0)
	boltMinPageSize = 1024
	boltMaxPageSize = 1024 << 14 // bbolt looks no further for meta page 1
)

// boltMeta is one decoded meta page.
type boltMeta struct {
	page     int // 0 or 1
	pageID   uint64
	pageFlag uint16
	magic    uint32
	version  uint32
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
	checksum uint64
	sum      uint64 // computed
}

func decodeBoltMeta(page int, b []byte) boltMeta {
	le := binary.LittleEndian
	m := boltMeta{
		page:     page,
		pageID:   le.Uint64(b[0:]),
		pageFlag: le.Uint16(b[8:]),
	}
	f := b[boltPageHeader : boltPageHeader+boltMetaLen]
	m.magic = le.Uint32(f[0:])
	m.version = le.Uint32(f[4:])
	m.pageSize = le.Uint32(f[8:])
	m.root = le.Uint64(f[16:])
	m.freelist = le.Uint64(f[32:])
	m.pgid = le.Uint64(f[40:])
	m.txid = le.Uint64(f[48:])
	m.checksum = le.Uint64(f[56:])
	h := fnv.New64a()
	_, _ = h.Write(f[:boltMetaSummed])
	m.sum = h.Sum64()
	return m
}

// valid is bbolt's own test of a meta page (Meta.Validate): the one bbolt
// applies when it chooses which of the two to use.
func (m boltMeta) valid() error {
	switch {
	case m.magic != boltMagic:
		return fmt.Errorf("meta page %d: bad magic %#x", m.page, m.magic)
	case m.version != boltVersion:
		return fmt.Errorf("meta page %d: bbolt file version %d, want %d", m.page, m.version, boltVersion)
	case m.checksum != m.sum:
		return fmt.Errorf("meta page %d: checksum %016x does not match its contents (%016x)", m.page, m.checksum, m.sum)
	}
	return nil
}

// bounds checks what bbolt does not before trusting a meta page: that it is
// where it says, that its page size is sane, and that everything it points at
// lies below its high-water mark, inside the file.
func (m boltMeta) bounds(fileSize int64) error {
	ps := uint64(m.pageSize)
	switch {
	case m.pageSize < boltMinPageSize || m.pageSize > boltMaxPageSize || m.pageSize&(m.pageSize-1) != 0:
		return fmt.Errorf("meta page %d: page size %d is not a power of two in [%d, %d]", m.page, m.pageSize, boltMinPageSize, boltMaxPageSize)
	case m.pageID != uint64(m.page) || m.pageFlag&boltMetaFlag == 0:
		return fmt.Errorf("meta page %d: page header says page %d, flags %#x", m.page, m.pageID, m.pageFlag)
	case m.pgid < 4 || m.pgid > uint64(fileSize)/boltMinPageSize:
		// 4: two meta pages, a freelist page and the root bucket's page
		// in the smallest file bbolt makes.
		return fmt.Errorf("meta page %d: high-water mark %d pages is impossible for a file of %d bytes", m.page, m.pgid, fileSize)
	case m.root < 2 || m.root >= m.pgid:
		return fmt.Errorf("meta page %d: root bucket at page %d, outside [2, %d)", m.page, m.root, m.pgid)
	case m.freelist != boltNoFreelist && (m.freelist < 2 || m.freelist >= m.pgid):
		return fmt.Errorf("meta page %d: freelist at page %d, outside [2, %d)", m.page, m.freelist, m.pgid)
	case m.pgid*ps > uint64(fileSize):
		return fmt.Errorf("truncated: meta page %d says the file holds %d pages of %d bytes (%d bytes), but it has %d bytes",
			m.page, m.pgid, ps, m.pgid*ps, fileSize)
	}
	return nil
}

// fileReport is what preflight learned about a file.
type fileReport struct {
	size     int64
	empty    bool     // 0 bytes: a read-write open initialises it
	pageSize uint32   // of the meta page in use
	pgid     uint64   // its high-water mark
	txid     uint64   // its transaction id
	warnings []string // damage bbolt recovers from by itself
}

// preflight checks path's two meta pages and its size before bbolt maps the
// file. bbolt trusts the meta page it picks: a page count beyond the end of a
// truncated file becomes a memory fault (SIGBUS) at the first read of a
// missing page, and a root or freelist page number out of range an assertion
// or a fault. preflight turns those into a *CorruptError naming what is
// wrong, and a file that is not bbolt at all into ErrFormat.
//
// bbolt uses the valid meta page with the higher transaction id and falls
// back to the other when one is torn (a crash during its write): one bad
// meta page is a warning, not corruption.
func preflight(path string) (fileReport, error) {
	var r fileReport
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return r, err
	}
	if !st.Mode().IsRegular() {
		return r, fmt.Errorf("open database %s: not a regular file (%s): %w", path, st.Mode().Type(), ErrFormat)
	}
	r.size = st.Size()
	if r.size == 0 {
		r.empty = true
		return r, nil
	}
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: path, Reason: fmt.Sprintf(format, args...)}
	}
	if r.size < 2*boltMinPageSize {
		return r, corrupt("the file has %d bytes, less than two meta pages", r.size)
	}

	readPage := func(off int64) ([]byte, error) {
		buf := make([]byte, boltPageHeader+boltMetaLen)
		_, err := f.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read database %s at %d: %w", path, off, err)
		}
		return buf, nil
	}
	first, err := readPage(0)
	if err != nil {
		return r, err
	}
	m0 := decodeBoltMeta(0, first)
	// Where is meta page 1? At page size m0.pageSize if meta page 0 is
	// valid; otherwise bbolt tries every page size from 1 KiB up, as here.
	var m1 boltMeta
	found1 := false
	if m0.valid() == nil && m0.pageSize >= boltMinPageSize && m0.pageSize <= boltMaxPageSize {
		if int64(m0.pageSize)+boltPageHeader+boltMetaLen <= r.size {
			b, err := readPage(int64(m0.pageSize))
			if err != nil {
				return r, err
			}
			m1, found1 = decodeBoltMeta(1, b), true
		}
	} else {
		for ps := int64(boltMinPageSize); ps <= boltMaxPageSize && ps+boltPageHeader+boltMetaLen <= r.size; ps <<= 1 {
			b, err := readPage(ps)
			if err != nil {
				return r, err
			}
			if m := decodeBoltMeta(1, b); m.valid() == nil {
				m1, found1 = m, true
				break
			}
		}
	}

	metas := []boltMeta{m0}
	if found1 {
		metas = append(metas, m1)
	}
	var use *boltMeta
	var invalid []string
	for i := range metas {
		if err := metas[i].valid(); err != nil {
			invalid = append(invalid, err.Error())
			continue
		}
		if use == nil || metas[i].txid > use.txid {
			use = &metas[i]
		}
	}
	if !found1 {
		invalid = append(invalid, "meta page 1: not found at any page size")
	}
	if use == nil {
		if m0.magic != boltMagic && (!found1 || m1.magic != boltMagic) && !allZero(first) {
			return r, fmt.Errorf("open database %s: not a bbolt database (%s): %w", path, invalid[0], ErrFormat)
		}
		if allZero(first) {
			return r, corrupt("both meta pages are unreadable (meta page 0 is zeroed; %s)", invalid[len(invalid)-1])
		}
		return r, corrupt("both meta pages are unreadable (%s)", joinReasons(invalid))
	}
	if err := use.bounds(r.size); err != nil {
		return r, corrupt("%v", err)
	}
	for i := range metas {
		if &metas[i] == use {
			continue
		}
		if metas[i].valid() == nil && metas[i].pageSize != use.pageSize {
			return r, corrupt("meta pages disagree on the page size: %d and %d", m0.pageSize, m1.pageSize)
		}
	}
	for _, s := range invalid {
		r.warnings = append(r.warnings, fmt.Sprintf("%s; bbolt uses meta page %d (transaction %d), which is intact", s, use.page, use.txid))
	}
	r.pageSize, r.pgid, r.txid = use.pageSize, use.pgid, use.txid
	return r, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func joinReasons(rs []string) string { return strings.Join(rs, "; ") }

// notExist is the error of a read-only open of a file that is missing or
// empty: nothing has been built there.
func notExist(path string, empty bool) error {
	return &NoDatabaseError{Path: path, Empty: empty}
}
