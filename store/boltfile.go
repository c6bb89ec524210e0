package store

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
	"slices"
	"strings"
)

// What checkFile reads of the file (check.go): its meta pages and its page
// tree, walked without bbolt.

// The bbolt file format (go.etcd.io/bbolt v1.5.0, internal/common), read here
// without bbolt so a damaged file is never mapped: bbolt reads pages through
// mmap, and a page past the end of the file raises SIGBUS, one outside the
// mapping SIGSEGV, neither of which a Go program can recover from.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	pageHeaderSize  = 16 // id u64, flags u16, count u16, overflow u32
	metaSize        = 64 // magic .. checksum, after the page header
	metaSumOffset   = 56 // the checksum covers the meta bytes before it
	elementSize     = 16 // branch: pos, ksize, pgid; leaf: flags, pos, ksize, vsize
	inBucketSize    = 16 // root pgid u64, sequence u64
	flagBranch      = 0x01
	flagLeaf        = 0x02
	flagFreelist    = 0x10
	flagBucketLeaf  = 0x01
	pgidNoFreelist  = ^uint64(0)
	minPageSize     = 1024
	maxPageSize     = 1 << 24
	maxCheckedDepth = 64
)

type boltMeta struct {
	pageSize       uint32
	root, freelist uint64
	pgid, txid     uint64
	invalid        string // why it does not validate; "" if it does
	magic, version uint32
	checksum, sum  uint64
}

func parseMeta(b []byte) boltMeta {
	le := binary.LittleEndian
	var m boltMeta
	if len(b) < pageHeaderSize+metaSize {
		m.invalid = "cut short by the end of the file"
		return m
	}
	d := b[pageHeaderSize:]
	m.magic, m.version, m.pageSize = le.Uint32(d[0:4]), le.Uint32(d[4:8]), le.Uint32(d[8:12])
	m.root, m.freelist = le.Uint64(d[16:24]), le.Uint64(d[32:40])
	m.pgid, m.txid, m.checksum = le.Uint64(d[40:48]), le.Uint64(d[48:56]), le.Uint64(d[56:64])
	h := fnv.New64a()
	_, _ = h.Write(d[:metaSumOffset])
	m.sum = h.Sum64()
	switch {
	case m.magic != boltMagic:
		m.invalid = fmt.Sprintf("bad magic %#x", m.magic)
	case m.version != boltVersion:
		m.invalid = fmt.Sprintf("bad version %d", m.version)
	case m.checksum != m.sum:
		m.invalid = "bad checksum"
	}
	return m
}

// readError is a fault reading the mapped file: the disk, not the store's
// content.
type readError struct{ fault any }

func (e *readError) Error() string { return fmt.Sprintf("reading the file faulted: %v", e.fault) }

// walk checks the freelist (unless pgidNoFreelist) and the tree from root. A
// memory fault while reading the mapping becomes a readError.
func (w *walker) walk(freelist, root uint64) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			// Only a memory fault has an address; anything else is a bug
			// here and stays a panic.
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = &readError{fault: r}
		}
	}()
	if freelist != pgidNoFreelist {
		if err := w.freelist(freelist); err != nil {
			return fmt.Errorf("freelist: %w", err)
		}
	}
	return w.tree(root, 0, nil)
}

// readAt reads up to n bytes at off; a short read returns what there is.
func readAt(f *os.File, off int64, n int) []byte {
	b := make([]byte, n)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}

// walker reads pages of a mapped bbolt file with bounds checks everywhere
// bbolt trusts the file.
type walker struct {
	data     []byte // the file's first hwm pages
	pageSize int
	hwm      uint64
	seen     map[uint64]bool
	// schema is the meta bucket's schema version, as the walk met it;
	// badSums counts the values whose checksum (sum.go) does not match,
	// firstBad names the first few by bucket and key.
	schema   uint32
	badSums  int
	firstBad []string
}

type rawPage struct {
	id       uint64
	flags    uint16
	count    int
	overflow uint32
	data     []byte // the whole page, overflow pages included
}

func (w *walker) page(id uint64) (rawPage, error) {
	if id < 2 || id >= w.hwm {
		return rawPage{}, fmt.Errorf("page id %d out of range [2, %d)", id, w.hwm)
	}
	le := binary.LittleEndian
	off := int(id) * w.pageSize
	hdr := w.data[off : off+pageHeaderSize] // id < hwm: inside the mapping
	p := rawPage{id: le.Uint64(hdr[0:8]), flags: le.Uint16(hdr[8:10]), count: int(le.Uint16(hdr[10:12])), overflow: le.Uint32(hdr[12:16])}
	if p.id != id {
		return p, fmt.Errorf("page %d: identifies itself as page %d", id, p.id)
	}
	if uint64(p.overflow) >= w.hwm-id {
		return p, fmt.Errorf("page %d: %d overflow pages run past the high-water mark %d", id, p.overflow, w.hwm)
	}
	p.data = w.data[off : off+(int(p.overflow)+1)*w.pageSize] // below hwm, checked above
	return p, nil
}

func (w *walker) freelist(id uint64) error {
	p, err := w.page(id)
	if err != nil {
		return err
	}
	if p.flags != flagFreelist {
		return fmt.Errorf("page %d: type %#x, want a freelist page", id, p.flags)
	}
	start, count := pageHeaderSize, p.count
	if count == 0xFFFF {
		if len(p.data) < pageHeaderSize+8 {
			return fmt.Errorf("page %d: truncated count", id)
		}
		c := binary.LittleEndian.Uint64(p.data[pageHeaderSize:])
		if c > uint64(len(p.data)) {
			return fmt.Errorf("page %d: count %d does not fit in the page", id, c)
		}
		start, count = pageHeaderSize+8, int(c)
	}
	if start+count*8 > len(p.data) {
		return fmt.Errorf("page %d: %d ids do not fit in the page", id, count)
	}
	for i := range count {
		fid := binary.LittleEndian.Uint64(p.data[start+8*i:])
		if fid < 2 || fid >= w.hwm {
			return fmt.Errorf("page %d: free page id %d out of range [2, %d)", id, fid, w.hwm)
		}
	}
	return nil
}

// tree walks the B+tree rooted at page id, and the buckets nested in it;
// path names the bucket (nil: the root).
func (w *walker) tree(id uint64, depth int, path []string) error {
	if depth > maxCheckedDepth {
		return fmt.Errorf("page %d: tree deeper than %d levels (a cycle?)", id, maxCheckedDepth)
	}
	if w.seen[id] {
		return fmt.Errorf("page %d: referenced twice", id)
	}
	w.seen[id] = true
	p, err := w.page(id)
	if err != nil {
		return err
	}
	return w.elements(p, depth, path)
}

// elements checks the elements of a branch or leaf page p (from the file or
// inline in a bucket value) and descends into children and buckets.
func (w *walker) elements(p rawPage, depth int, path []string) error {
	sums := sealedBucket(path)
	le := binary.LittleEndian
	if p.flags != flagBranch && p.flags != flagLeaf {
		return fmt.Errorf("page %d: type %#x, want a branch or leaf page", p.id, p.flags)
	}
	if pageHeaderSize+p.count*elementSize > len(p.data) {
		return fmt.Errorf("page %d: %d elements do not fit in the page", p.id, p.count)
	}
	for i := range p.count {
		at := pageHeaderSize + i*elementSize
		e := p.data[at : at+elementSize]
		if p.flags == flagBranch {
			pos, ksize, child := int(le.Uint32(e[0:4])), int(le.Uint32(e[4:8])), le.Uint64(e[8:16])
			if at+pos+ksize > len(p.data) {
				return fmt.Errorf("page %d: branch element %d: key outside the page", p.id, i)
			}
			if err := w.tree(child, depth+1, path); err != nil {
				return err
			}
			continue
		}
		flags, pos, ksize, vsize := le.Uint32(e[0:4]), int(le.Uint32(e[4:8])), int(le.Uint32(e[8:12])), int(le.Uint32(e[12:16]))
		if at+pos+ksize+vsize > len(p.data) || pos < 0 || ksize < 0 || vsize < 0 {
			return fmt.Errorf("page %d: leaf element %d: key or value outside the page", p.id, i)
		}
		if flags&^flagBucketLeaf != 0 {
			return fmt.Errorf("page %d: leaf element %d: unknown flags %#x", p.id, i, flags)
		}
		k, v := p.data[at+pos:at+pos+ksize], p.data[at+pos+ksize:at+pos+ksize+vsize]
		if flags&flagBucketLeaf == 0 {
			w.value(path, sums, k, v)
			continue
		}
		sub := append(slices.Clip(path), string(k))
		if len(v) < inBucketSize {
			return fmt.Errorf("page %d: leaf element %d: bucket header cut short", p.id, i)
		}
		if root := le.Uint64(v[0:8]); root != 0 {
			if err := w.tree(root, depth+1, sub); err != nil {
				return err
			}
			continue
		}
		// An inline bucket: its page follows the header in the value.
		in := v[inBucketSize:]
		if len(in) < pageHeaderSize {
			return fmt.Errorf("page %d: leaf element %d: inline bucket cut short", p.id, i)
		}
		ip := rawPage{id: p.id, flags: le.Uint16(in[8:10]), count: int(le.Uint16(in[10:12])), data: in}
		if ip.flags != flagLeaf {
			return fmt.Errorf("page %d: leaf element %d: inline bucket of type %#x", p.id, i, ip.flags)
		}
		if err := w.elements(ip, depth+1, sub); err != nil {
			return err
		}
	}
	return nil
}

// sealedBucket reports whether the values of the bucket at path end with a
// checksum (sum.go): 'r' for records, 'm' for mirrored payloads, 0 for none.
// The stage bucket is not checked: Open drops it.
func sealedBucket(path []string) byte {
	if len(path) != 3 || (path[2] != "flow" && path[2] != "group" && path[2] != "meter") {
		return 0
	}
	switch path[0] {
	case string(bucketBridges):
		return 'r'
	case string(bucketMirror):
		return 'm'
	}
	return 0
}

// maxNamedSums is how many damaged values a refusal names.
const maxNamedSums = 3

// value checks the value v at key k of the bucket at path: its checksum
// (sums, from sealedBucket), or the schema version in meta.
func (w *walker) value(path []string, sums byte, k, v []byte) {
	switch {
	case sums == 'r':
		if _, _, err := openRecord(k, v); err != nil {
			w.bad(path, k, err)
		}
	case sums == 'm':
		if _, err := unseal(k, v); err != nil {
			w.bad(path, k, err)
		}
	case len(path) == 1 && path[0] == string(bucketMeta) && string(k) == string(keySchema) && len(v) == 4:
		w.schema = binary.BigEndian.Uint32(v)
	}
}

func (w *walker) bad(path []string, k []byte, err error) {
	w.badSums++
	if len(w.firstBad) < maxNamedSums {
		w.firstBad = append(w.firstBad, fmt.Sprintf("bucket %s key %s: %v", strings.Join(path, "/"), keyHex(k), err))
	}
}
