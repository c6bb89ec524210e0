package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

// The refs bucket of a bridge indexes which flows use which group or meter:
//
//	kind (1 byte) | group or meter id (4 bytes) | flow identity  ->  module
//
// It is kept in the transaction that changes the flows, so "is group 5 used"
// is one cursor seek, whatever the number of flows: a delete of a group that
// 30,000 flows use costs what a delete of an unused one does, and only a
// refusal reads the users (to name them).
// (bucketRefs, buckets.go)

func refPrefix(kind entry.Kind, id []byte) []byte { return append([]byte{byte(kind)}, id...) }

// flowRefs are the groups and meters a flow's payload uses, each once. The
// payload is the truth: a caller cannot make the store forget a reference.
func flowRefs(payload []byte) []entry.Ref {
	refs := entry.FlowRefs(payload)
	slices.SortFunc(refs, func(a, b entry.Ref) int {
		if a.Kind != b.Kind {
			return int(a.Kind) - int(b.Kind)
		}
		return int(int64(a.ID) - int64(b.ID))
	})
	return slices.Compact(refs)
}

// refMoves are a write's changes to the refs index, applied in key order
// once its flows are written (apply, or for a staged write stageRefs). The
// refs of flows in flow order are in no order of their own, and bbolt splits
// a node only at commit: each key put out of order moves every key the
// transaction already put in that node, so 50,000 flows using groups took 7 s
// to index into an empty bucket one by one, and 100,000 of a staged write
// 28 s; sorted, they append.
type refMoves struct {
	del, add refList
}

// move records that flow id of module changes from payload prev (nil: new)
// to payload (nil: removed). A change that keeps its refs moves nothing.
func (m *refMoves) move(module string, id, prev, payload []byte) {
	before, after := flowRefs(prev), flowRefs(payload)
	if slices.Equal(before, after) {
		return
	}
	for _, r := range before {
		m.del.add(r, id, "")
	}
	for _, r := range after {
		m.add.add(r, id, module)
	}
}

func (m *refMoves) empty() bool { return m.del.len() == 0 && m.add.len() == 0 }

// apply writes the moves to br's refs bucket, the deletes first, and forgets
// them.
func (m *refMoves) apply(br *bolt.Bucket) error {
	if m.empty() {
		return nil
	}
	m.del.sort()
	m.add.sort()
	rb := br.Bucket(bucketRefs)
	if rb == nil && m.add.len() > 0 {
		var err error
		if rb, err = br.CreateBucket(bucketRefs); err != nil {
			return err
		}
	}
	if rb != nil {
		for i := range m.del.len() {
			if err := rb.Delete(m.del.key(i)); err != nil {
				return err
			}
		}
		for i := range m.add.len() {
			if err := rb.Put(m.add.key(i), m.add.value(i)); err != nil {
				return err
			}
		}
	}
	*m = refMoves{}
	return nil
}

// refList is a list of refs index entries (key, and the owner as value)
// packed into chunks: a staged write of a million flows using groups holds
// a million of them, 16 bytes each beside their bytes, where a slice
// and a string per entry took 56.
type refList struct {
	chunks [][]byte
	at     []refAt
}

type refAt struct {
	chunk, off, klen uint32
	vlen             uint16
}

const refChunk = 1 << 20

// add appends the index entry of flow id using r, with value module.
func (l *refList) add(r entry.Ref, id []byte, module string) {
	n := 5 + len(id) + len(module)
	if len(l.chunks) == 0 || cap(l.chunks[len(l.chunks)-1])-len(l.chunks[len(l.chunks)-1]) < n {
		l.chunks = append(l.chunks, make([]byte, 0, max(refChunk, n)))
	}
	c := len(l.chunks) - 1
	b := l.chunks[c]
	at := refAt{chunk: uint32(c), off: uint32(len(b)), klen: uint32(5 + len(id)), vlen: uint16(len(module))}
	b = append(b, byte(r.Kind))
	b = binary.BigEndian.AppendUint32(b, r.ID)
	b = append(b, id...)
	l.chunks[c] = append(b, module...)
	l.at = append(l.at, at)
}

func (l *refList) len() int { return len(l.at) }

func (l *refList) key(i int) []byte {
	a := l.at[i]
	return l.chunks[a.chunk][a.off : a.off+a.klen]
}

func (l *refList) value(i int) []byte {
	a := l.at[i]
	start := a.off + a.klen
	return l.chunks[a.chunk][start : start+uint32(a.vlen)]
}

func (l *refList) sort() {
	slices.SortFunc(l.at, func(a, b refAt) int {
		return bytes.Compare(l.chunks[a.chunk][a.off:a.off+a.klen], l.chunks[b.chunk][b.off:b.off+b.klen])
	})
}

// InUseError refuses the removal of a group or meter that declared flows
// still use. It wraps ErrFailedPrecondition.
type InUseError struct {
	// Ref is the group or meter.
	Ref entry.Ref
	// Flows is the number of flows that use it; Modules their owners, sorted.
	Flows   int
	Modules []string
	// First is one of the flows (its identity, owner and payload).
	First entry.Entry
	// FirstText is First as Options.Describe prints it; empty, the message
	// gives First's table and priority.
	FirstText string
}

func (e *InUseError) Error() string {
	flows, mods := "flows", "modules"
	if e.Flows == 1 {
		flows = "flow"
	}
	if len(e.Modules) == 1 {
		mods = "module"
	}
	first := e.FirstText
	if first == "" && len(e.First.ID) >= 3 {
		first = fmt.Sprintf("table=%d,priority=%d (module %s)", e.First.ID[0], int(e.First.ID[1])<<8|int(e.First.ID[2]), e.First.Module)
	}
	return fmt.Sprintf("%s is used by %d %s of %s %s: first: %s: delete or change those flows in the same request: %v",
		e.Ref, e.Flows, flows, mods, strings.Join(e.Modules, ", "), first, errdefs.ErrFailedPrecondition)
}

func (e *InUseError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// checkUsers fails when a group or meter of removed is gone from the bridge
// (after the request's own writes) while a flow still uses it. index gives
// the request index of removed[j] (nil: no index).
func checkUsers(br *bolt.Bucket, removed []entry.Entry, index func(j int) int, describe func(entry.Entry) string) error {
	rb := br.Bucket(bucketRefs)
	if rb == nil {
		return nil
	}
	for j, r := range removed {
		if r.Kind != entry.KindGroup && r.Kind != entry.KindMeter {
			continue
		}
		if kb := br.Bucket(kindBuckets[r.Kind]); kb != nil && kb.Get(r.ID) != nil {
			continue // declared again by the same request
		}
		prefix := refPrefix(r.Kind, r.ID)
		c, used := firstUser(rb, prefix)
		if !used {
			continue
		}
		err := usersError(br, c, prefix, r, describe)
		if index != nil {
			return &errdefs.EntryError{Index: index(j), Err: err}
		}
		return err
	}
	return nil
}

// firstUser returns a cursor at the first flow that uses the group or
// meter of prefix (refPrefix), and whether there is one.
func firstUser(rb *bolt.Bucket, prefix []byte) (*bolt.Cursor, bool) {
	c := rb.Cursor()
	k, _ := c.Seek(prefix)
	return c, k != nil && bytes.HasPrefix(k, prefix)
}

// Used reports whether a flow of any module on bridge uses the group or
// meter kind/id, inside the write transaction: a caller that must not have
// a Delete refused (checkUsers fails the transaction) asks first.
func (w *Writer) Used(bridge string, kind entry.Kind, id []byte) bool {
	br := w.tx.Bucket(bucketBridges).Bucket([]byte(bridge))
	if br == nil {
		return false
	}
	rb := br.Bucket(bucketRefs)
	if rb == nil {
		return false
	}
	_, used := firstUser(rb, refPrefix(kind, id))
	return used
}

// usersError reads every user of r, from the cursor positioned at the first.
func usersError(br *bolt.Bucket, c *bolt.Cursor, prefix []byte, r entry.Entry, describe func(entry.Entry) string) error {
	e := &InUseError{Ref: entry.Ref{Kind: r.Kind}}
	if len(r.ID) == 4 {
		e.Ref.ID = uint32(r.ID[0])<<24 | uint32(r.ID[1])<<16 | uint32(r.ID[2])<<8 | uint32(r.ID[3])
	}
	mods := map[string]bool{}
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if e.Flows == 0 {
			e.First = entry.Entry{Kind: entry.KindFlow, Module: string(v), ID: bytes.Clone(k[len(prefix):])}
			if fb := br.Bucket(kindBuckets[entry.KindFlow]); fb != nil {
				if rec := fb.Get(e.First.ID); rec != nil {
					if _, payload, err := decodeRecord(e.First.ID, rec); err == nil {
						e.First.Payload = payload
					}
				}
			}
		}
		e.Flows++
		mods[string(v)] = true
	}
	for m := range mods {
		e.Modules = append(e.Modules, m)
	}
	if describe != nil && e.First.Payload != nil {
		e.FirstText = describe(e.First)
	}
	slices.Sort(e.Modules)
	return e
}
