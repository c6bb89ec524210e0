package store

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// A Spool holds a large request on disk instead of in memory, as sorted
// runs: entries are collected a run at a time, sorted by kind and identity
// and appended to a file; reading merges the runs, so the whole request
// comes back in key order with one buffered reader per run. A write of a
// million entries then needs the memory of one run, not of the request
// (Stage).
//
// Groups and meters are the exception: they stay in memory, copied, because
// a staged write decides them before its flows (the flows are checked
// against them, and the switch takes them first), and a node declares
// thousands of them, not millions (maxSpooledNonFlows).
//
// The file is unlinked as soon as it is created, in the store's directory:
// nothing is left behind when flowstated dies, and the page cache, not
// anonymous memory, holds what the kernel keeps of it. A Spool is used by
// one goroutine at a time.
type Spool struct {
	// runEntries bounds a run's entries (Store.spoolRunEntries).
	runEntries int
	f          *os.File
	w          *bufio.Writer
	off        int64
	runs       []spoolRun
	// cur is the run being collected: its entries and their payload bytes.
	cur      []spooled
	curBytes int
	n        int
	kinds    [4]int // by entry.Kind
	// nonFlows are the groups and meters, in request order; their slices
	// are the spool's own.
	nonFlows []spooled
	err      error
}

type spoolRun struct {
	off, size int64
	n         int
}

// spooled is an entry of a spool: what a request declares, and where.
type spooled struct {
	kind    entry.Kind
	opaque  bool
	index   int
	id      []byte
	payload []byte
}

// defaultSpoolRunEntries (Store.spoolRunEntries) and spoolRunBytes bound a
// run in memory.
const (
	defaultSpoolRunEntries = 32 << 10
	spoolRunBytes          = 16 << 20
)

// maxSpooledNonFlows bounds the groups and meters of one spooled request,
// which stay in memory. 100,000 groups of a few
// buckets hold about 50 MB.
const maxSpooledNonFlows = 100_000

const (
	// spoolRecordHeader: kind, flags, index (4), id length (2), payload
	// length (4).
	spoolRecordHeader = 12
	spoolReadBuffer   = 64 << 10
)

// NewSpool creates an empty spool next to the store's file.
func (sg Staging) NewSpool() (*Spool, error) {
	f, err := os.CreateTemp(filepath.Dir(sg.s.Path()), ".spool-*")
	if err != nil {
		return nil, writeErrorAt(sg.s.Path(), fmt.Errorf("store: spool: %w", err))
	}
	// Unlinked at once: a flowstated that dies leaves no file.
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("store: spool: %w", err)
	}
	return &Spool{f: f, w: bufio.NewWriterSize(f, 1<<20), runEntries: sg.s.spoolRunEntries}, nil
}

// Add appends es, the next entries of the request, numbered from Len. The
// spool keeps es's slices until its run is written: the caller must not
// change them.
func (sp *Spool) Add(es []entry.Entry) error {
	if sp.err != nil {
		return sp.err
	}
	for _, e := range es {
		if !e.Kind.Valid() {
			return fmt.Errorf("store: spool: entry %d: invalid kind %d: %w", sp.n, e.Kind, errdefs.ErrInvalidArgument)
		}
		if len(e.ID) > 0xffff {
			return fmt.Errorf("store: spool: entry %d: identity of %d bytes: %w", sp.n, len(e.ID), errdefs.ErrInvalidArgument)
		}
		sp.kinds[e.Kind]++
		sp.n++
		if e.Kind != entry.KindFlow {
			if err := sp.addNonFlow(e, sp.n-1); err != nil {
				return err
			}
			continue
		}
		sp.cur = append(sp.cur, spooled{kind: e.Kind, opaque: e.Opaque, index: sp.n - 1, id: e.ID, payload: e.Payload})
		sp.curBytes += spoolRecordHeader + len(e.ID) + len(e.Payload)
		if len(sp.cur) >= sp.runEntries || sp.curBytes >= spoolRunBytes {
			if err := sp.flushRun(); err != nil {
				return err
			}
		}
	}
	return nil
}

// addNonFlow keeps group or meter e, entry i of the request, in memory. Its
// bytes are copied: the caller's may share a buffer with the flows around
// them, which would stay pinned with them.
func (sp *Spool) addNonFlow(e entry.Entry, i int) error {
	if len(sp.nonFlows) >= maxSpooledNonFlows {
		sp.err = fmt.Errorf("store: spool: entry %d: more than %d groups and meters in one request, the most a staged write holds in memory: "+
			"declare them in several requests (a Put of groups before the flows that use them): %w", i, maxSpooledNonFlows, errdefs.ErrInvalidArgument)
		return sp.err
	}
	b := make([]byte, len(e.ID)+len(e.Payload))
	copy(b, e.ID)
	copy(b[len(e.ID):], e.Payload)
	sp.nonFlows = append(sp.nonFlows, spooled{kind: e.Kind, opaque: e.Opaque, index: i,
		id: b[:len(e.ID):len(e.ID)], payload: b[len(e.ID):]})
	return nil
}

// sortedNonFlows is the groups and meters of the spool in key order (equal
// identities in request order).
func (sp *Spool) sortedNonFlows() []spooled {
	slices.SortFunc(sp.nonFlows, func(a, b spooled) int { return compareSpooled(&a, &b) })
	return sp.nonFlows
}

// Len is the number of entries added.
func (sp *Spool) Len() int { return sp.n }

// Count is the number of entries of kind added.
func (sp *Spool) Count(kind entry.Kind) int {
	if !kind.Valid() {
		return 0
	}
	return sp.kinds[kind]
}

// Close releases the file.
func (sp *Spool) Close() error {
	sp.cur, sp.nonFlows = nil, nil
	if sp.f == nil {
		return nil
	}
	err := sp.f.Close()
	sp.f = nil
	return err
}

func compareSpooled(a, b *spooled) int {
	return cmp.Or(compareKey(a.kind, a.id, b.kind, b.id), cmp.Compare(a.index, b.index))
}

// flushRun sorts the run being collected and appends it to the file.
func (sp *Spool) flushRun() error {
	if len(sp.cur) == 0 {
		return nil
	}
	slices.SortFunc(sp.cur, func(a, b spooled) int { return compareSpooled(&a, &b) })
	run := spoolRun{off: sp.off, n: len(sp.cur)}
	var hdr [spoolRecordHeader]byte
	for i := range sp.cur {
		e := &sp.cur[i]
		hdr[0] = byte(e.kind)
		hdr[1] = 0
		if e.opaque {
			hdr[1] = 1
		}
		binary.BigEndian.PutUint32(hdr[2:], uint32(e.index))
		binary.BigEndian.PutUint16(hdr[6:], uint16(len(e.id)))
		binary.BigEndian.PutUint32(hdr[8:], uint32(len(e.payload)))
		_, _ = sp.w.Write(hdr[:])
		_, _ = sp.w.Write(e.id)
		if _, err := sp.w.Write(e.payload); err != nil {
			return sp.fail(err)
		}
		run.size += int64(spoolRecordHeader + len(e.id) + len(e.payload))
	}
	if err := sp.w.Flush(); err != nil {
		return sp.fail(err)
	}
	sp.off += run.size
	sp.runs = append(sp.runs, run)
	clear(sp.cur) // drop the request's slices
	sp.cur, sp.curBytes = sp.cur[:0], 0
	return nil
}

func (sp *Spool) fail(err error) error {
	// A full disk is reported as such (ErrResourceExhausted).
	sp.err = writeErrorAt(filepath.Dir(sp.f.Name()), fmt.Errorf("store: spool: writing the request: %w", err))
	return sp.err
}

// spoolIter reads a spool in key order: a merge of its runs.
type spoolIter struct {
	h   runHeap
	err error
}

type runReader struct {
	r    *bufio.Reader
	left int
	cur  spooled
	buf  []byte
}

// next reads the run's next record into cur, reusing buf. false at the end.
func (rr *runReader) next() (bool, error) {
	if rr.left == 0 {
		return false, nil
	}
	var hdr [spoolRecordHeader]byte
	if _, err := io.ReadFull(rr.r, hdr[:]); err != nil {
		return false, err
	}
	idLen, payLen := int(binary.BigEndian.Uint16(hdr[6:])), int(binary.BigEndian.Uint32(hdr[8:]))
	if cap(rr.buf) < idLen+payLen {
		rr.buf = make([]byte, idLen+payLen)
	}
	rr.buf = rr.buf[:idLen+payLen]
	if _, err := io.ReadFull(rr.r, rr.buf); err != nil {
		return false, err
	}
	rr.cur = spooled{kind: entry.Kind(hdr[0]), opaque: hdr[1] == 1, index: int(binary.BigEndian.Uint32(hdr[2:])),
		id: rr.buf[:idLen:idLen], payload: rr.buf[idLen:]}
	rr.left--
	return true, nil
}

type runHeap []*runReader

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return compareSpooled(&h[i].cur, &h[j].cur) < 0 }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(*runReader)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// iter ends the last run and starts reading the spool's flows in key order
// (equal identities in request order).
func (sp *Spool) iter() (*spoolIter, error) {
	if sp.err != nil {
		return nil, sp.err
	}
	if sp.f == nil {
		return nil, fmt.Errorf("store: spool: read after close: %w", errdefs.ErrInternal)
	}
	if err := sp.flushRun(); err != nil {
		return nil, err
	}
	it := &spoolIter{}
	for _, run := range sp.runs {
		rr := &runReader{r: bufio.NewReaderSize(io.NewSectionReader(sp.f, run.off, run.size), spoolReadBuffer), left: run.n}
		ok, err := rr.next()
		if err != nil {
			return nil, fmt.Errorf("store: spool: %w", err)
		}
		if ok {
			it.h = append(it.h, rr)
		}
	}
	heap.Init(&it.h)
	return it, nil
}

// peek is the next entry, nil at the end or after an error (err). Its
// slices are valid until the next call of next.
func (it *spoolIter) peek() *spooled {
	if it.err != nil || len(it.h) == 0 {
		return nil
	}
	return &it.h[0].cur
}

// next moves past the entry peek returned.
func (it *spoolIter) next() {
	if len(it.h) == 0 {
		return
	}
	rr := it.h[0]
	ok, err := rr.next()
	switch {
	case err != nil:
		it.err = fmt.Errorf("store: spool: %w", err)
	case ok:
		heap.Fix(&it.h, 0)
	default:
		heap.Pop(&it.h)
	}
}
