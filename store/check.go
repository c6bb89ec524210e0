package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// CorruptError says the store file is damaged and flowstated must not run on
// it: a replay from a damaged store would delete flows from the switch, and
// bbolt itself would panic, or fault, on a damaged page.
type CorruptError struct {
	Path string
	// Detail names what is wrong (a meta page, the file size, a page).
	Detail string
}

func (e *CorruptError) Error() string {
	// The recovery procedure is in the docs; the error names the section.
	return fmt.Sprintf("store: %s is corrupt: %s; flowstated will not start on it: restore the latest backup to %s, "+
		"or start from an empty store and adopt the bridges with --take-over (docs/operations.md, \"Store corruption\")",
		e.Path, e.Detail, e.Path)
}

// Preflight is what checkFile learnt of the file before bbolt opens it.
type Preflight struct {
	// Missing: no file (a new store is created). Empty: a file of 0 bytes,
	// which bbolt initialises as a new store (a truncated file, or a bad
	// restore of a backup); the bridges this store never managed stand aside.
	Missing, Empty bool
	// Size of the file and PageSize of the store.
	Size     int64
	PageSize int
	// Txid is the last committed transaction.
	Txid uint64
}

// checkFile validates the file header and page tree of the store at path by
// reading the file through a read-only mapping of its own, before bbolt opens it:
//
//  1. both meta pages: magic, version, checksum. bbolt silently falls back to
//     the older one when the newer does not validate, which loses the last
//     acknowledged write: refused, as is a file where neither validates;
//  2. the file holds every page the meta counts (a half-truncated file would
//     raise SIGBUS in bbolt);
//  3. the freelist and every page reachable from the root: page ids below the
//     high-water mark, types, element offsets inside their page, no cycles.
//
// bbolt's own tx.Check (checkTree) then finds what remains: key order, pages
// referenced twice, reachable freed pages, unreachable pages.
func checkFile(path string) (Preflight, error) {
	var pf Preflight
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		pf.Missing = true
		return pf, nil
	}
	if err != nil {
		return pf, fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	// A file another process holds (its lock) may be mid-write: leave it
	// to bbolt's lock timeout, which names the real problem.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return pf, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return pf, fmt.Errorf("store: %w", err)
	}
	pf.Size = fi.Size()
	if pf.Size == 0 {
		pf.Empty = true
		return pf, nil
	}
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: path, Detail: fmt.Sprintf(format, args...)}
	}
	head := make([]byte, 4096)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return pf, fmt.Errorf("store: read %s: %w", path, err)
	}
	m0 := parseMeta(head[:n])
	// The page size is in meta 0; when meta 0 is damaged, look for meta 1
	// at every page size bbolt may have used, as bbolt does.
	pageSize := int(m0.pageSize)
	if m0.invalid != "" {
		pageSize = 0
		for ps := minPageSize; ps <= maxPageSize && int64(ps) < pf.Size; ps <<= 1 {
			if m := parseMeta(readAt(f, int64(ps), pageHeaderSize+metaSize)); m.invalid == "" {
				pageSize = int(m.pageSize)
				break
			}
		}
	}
	if pageSize < minPageSize || pageSize > maxPageSize || pageSize&(pageSize-1) != 0 {
		if m0.invalid != "" {
			return pf, corrupt("both meta pages are invalid (meta 0: %s; no valid meta 1 found); this is not a readable store", m0.invalid)
		}
		return pf, corrupt("meta 0 gives an impossible page size %d", pageSize)
	}
	pf.PageSize = pageSize
	m1 := parseMeta(readAt(f, int64(pageSize), pageHeaderSize+metaSize))
	if m0.invalid != "" && m1.invalid != "" {
		return pf, corrupt("both meta pages are invalid (meta 0: %s; meta 1: %s)", m0.invalid, m1.invalid)
	}
	if m0.invalid != "" || m1.invalid != "" {
		bad, why, good := 0, m0.invalid, m1
		if m0.invalid == "" {
			bad, why, good = 1, m1.invalid, m0
		}
		return pf, corrupt("meta page %d is invalid (%s): bbolt would silently fall back to the older meta page "+
			"(transaction %d) and lose the writes acknowledged after it", bad, why, good.txid)
	}
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	pf.Txid = m.txid
	if m.pageSize != uint32(pageSize) || m0.pageSize != m1.pageSize {
		return pf, corrupt("the meta pages disagree on the page size (%d, %d)", m0.pageSize, m1.pageSize)
	}
	if m.pgid < 4 {
		return pf, corrupt("meta counts %d pages, fewer than an empty store has", m.pgid)
	}
	if need := int64(m.pgid) * int64(pageSize); pf.Size < need {
		return pf, corrupt("the file is %d bytes but its meta page counts %d pages of %d bytes (%d bytes): "+
			"the file was truncated", pf.Size, m.pgid, pageSize, need)
	}
	// The walk reads the file through a read-only mapping: page cache, not
	// heap, and no read call per page (a 1M-flow store has 100k pages).
	// The size was checked above, so every page below the high-water mark
	// is inside the mapping; a read error of the disk, which a read call
	// would return, faults instead, and walk turns the fault into an error.
	data, err := syscall.Mmap(int(f.Fd()), 0, int(int64(m.pgid)*int64(pageSize)), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return pf, fmt.Errorf("store: map %s: %w", path, err)
	}
	defer func() { _ = syscall.Munmap(data) }()
	w := &walker{data: data, pageSize: pageSize, hwm: m.pgid, seen: map[uint64]bool{}}
	if err := w.walk(m.freelist, m.root); err != nil {
		var re *readError
		if errors.As(err, &re) {
			return pf, fmt.Errorf("store: read %s: %w", path, err)
		}
		return pf, corrupt("%v", err)
	}
	// Checksums exist from schema 3 on; an older store gets them from its
	// migration, which checks what it converts.
	if w.schema >= 3 && w.badSums > 0 {
		return pf, corrupt("%d stored value(s) fail their checksum (CRC-32C over key and value), the first: %s",
			w.badSums, strings.Join(w.firstBad, "; "))
	}
	return pf, nil
}

// checkTree runs bbolt's consistency check in one read transaction. A panic
// inside bbolt becomes the returned error.
func checkTree(db *bolt.DB) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt panicked: %v", r)
		}
	}()
	return db.View(func(tx *bolt.Tx) error {
		var errs []error
		for e := range tx.Check() {
			// Drain the channel: the check's goroutine ends only then.
			if len(errs) < 5 {
				errs = append(errs, e)
			}
		}
		return errors.Join(errs...)
	})
}

// openBolt opens the file with bbolt, turning a panic inside bbolt (a
// damaged freelist, say) into an error. A damaged tree is found here when
// the meta page names no freelist: bbolt walks the tree to rebuild it, and
// panics with what its consistency check (checkTree) would have reported,
// which the error then says. bbolt leaves the file mapped, and so locked,
// when it panics; flowstated does not start on a damaged store.
func openBolt(path string, timeout time.Duration, syncFreelist bool) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			if msg, ok := r.(string); ok {
				if damage, ok := strings.CutPrefix(msg, "freepages: failed to get all reachable pages "); ok {
					db, err = nil, &checkError{detail: strings.TrimSuffix(strings.TrimPrefix(damage, "("), ")")}
					return
				}
			}
			db, err = nil, fmt.Errorf("bbolt panicked: %v", r)
		}
	}()
	return bolt.Open(path, 0o600, boltOptions(timeout, syncFreelist))
}

// checkError is damage bbolt's walk of the tree found.
type checkError struct{ detail string }

func (e *checkError) Error() string { return "consistency check: " + e.detail }

// boltOptions are the options the store opens its file with.
//
// NoFreelistSync, as etcd opens its backend: a commit does not write the
// freelist (a page of its own, and more once the freelist grows), and the
// meta page says so (pgidNoFreelist); bbolt rebuilds the freelist at open
// from the pages the tree does not reach, a walk of the whole tree, as the
// open's own check already makes. Both directions read: a store written by
// a flowstated that synced its freelist opens here (its freelist page is
// freed by the first commit), and an older flowstated, opening this one
// without the option, rebuilds the freelist the same way and writes it back
// before anything else. A commit killed halfway changes nothing of this: the
// meta page it did not write still names the last committed tree, whose
// unreached pages are the free ones.
// syncFreelist is the old flowstated's way, for tests (Options).
func boltOptions(timeout time.Duration, syncFreelist bool) *bolt.Options {
	return &bolt.Options{Timeout: timeout, InitialMmapSize: initialMmapSize, PageSize: newPageSize, NoFreelistSync: !syncFreelist}
}

// newPageSize is the page size of a store bbolt creates; one that exists
// keeps its own (its meta page says which). Pipelined writes insert a few
// thousand keys spread over the whole tree per transaction, and bbolt
// rewrites every leaf a transaction touches, one write call a page: with
// leaves of 16 KiB instead of the 4 KiB default a transaction touches far
// fewer of them. flowstated's CPU for the bench's 200,000 flows declared by
// eight writers fell from 1.98 s to 1.47 s with vswitchd running, from
// 1.80 s to 1.19 s with it down (docs/benchmarks.md); 32 KiB gained nothing
// more, 2 KiB lost.
const newPageSize = 16 << 10

// initialMmapSize is the address space bbolt maps at open. Mapping beyond the
// file costs no memory, and a file that grows within it needs no remap: a
// remap waits for every reader and first copies every node of the write
// transaction out of the old mapping (300 ms of a 200,000-flow Put). A store
// of a million flows takes about 340 MB.
const initialMmapSize = 1 << 30

// isCorrupt tells bbolt's errors about the file's content from others
// (permissions, I/O).
func isCorrupt(err error) bool {
	var ce *checkError
	return errors.As(err, &ce) || errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) ||
		errors.Is(err, bolterrors.ErrVersionMismatch) || strings.HasPrefix(err.Error(), "bbolt panicked")
}
