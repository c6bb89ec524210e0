package bridge

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/entry"
)

// Quarantine is the quarantine of one bridge, kept small: a switch that
// refuses 199,000 entries (a table's flow_limit) must not cost their
// payloads in memory. Per entry it holds its key (kind | identity) and a
// 16-byte record (qrec) whose reason and module are indexes into tables
// shared by every entry, and it counts the entries per module, kind and
// reason for status, metrics and events. The entries themselves stay in the
// store: status reads the few it lists (sample). The zero value is empty and
// ready to use; guarded by the bridge's mu.
type Quarantine struct {
	recs    map[string]qrec
	reasons strTable
	modules strTable
	counts  map[qcause]int
	// version changes with every change of recs, so a published sample is
	// rebuilt only when the quarantine changed.
	version uint64
}

// qrec is the record of one quarantined entry.
type qrec struct {
	// since is when it was quarantined, in unix seconds.
	since          uint32
	reason, module uint16
	kind           entry.Kind
	predicted      bool
	// damaged: the store found the entry damaged (damage.go), not the
	// switch; it cannot be read back, so a listing names its key.
	damaged bool
}

// qcause is a (module, kind, reason) of quarantined entries, as indexes.
type qcause struct {
	module, reason uint16
	kind           entry.Kind
}

// strTable interns the reasons or modules of a quarantine. It grows with
// the distinct strings only, and is dropped with the set.
type strTable struct {
	strs []string
	idx  map[string]uint16
}

// maxQuarantineStrings bounds a strTable: past it, further distinct
// strings share the last slot (their text becomes that of the first one
// stored there, which says so).
const maxQuarantineStrings = 1<<16 - 1

func (t *strTable) intern(s string) uint16 {
	if i, ok := t.idx[s]; ok {
		return i
	}
	if t.idx == nil {
		t.idx = map[string]uint16{}
	}
	if len(t.strs) >= maxQuarantineStrings {
		return uint16(len(t.strs) - 1)
	}
	i := uint16(len(t.strs))
	if len(t.strs) == maxQuarantineStrings-1 {
		s += " (and other reasons: too many distinct reasons to keep)"
	}
	t.strs = append(t.strs, strings.Clone(s))
	t.idx[t.strs[i]] = i
	return i
}

func (t *strTable) get(i uint16) string {
	if int(i) < len(t.strs) {
		return t.strs[i]
	}
	return ""
}

// Len is the number of quarantined entries.
func (q *Quarantine) Len() int { return len(q.recs) }

// Has reports whether k (key()) is quarantined.
func (q *Quarantine) Has(k string) bool {
	_, ok := q.recs[k]
	return ok
}

// Reason returns the reason of k and whether it was predicted; ok is false
// when k is not quarantined.
func (q *Quarantine) Reason(k string) (reason string, predicted, ok bool) {
	r, ok := q.recs[k]
	if !ok {
		return "", false, false
	}
	return q.reasons.get(r.reason), r.predicted, true
}

// add quarantines k, an entry of kind owned by module, for reason; an
// entry already quarantined gets the new record.
func (q *Quarantine) add(k string, kind entry.Kind, module, reason string, since time.Time, predicted bool) {
	if q.recs == nil {
		q.recs = map[string]qrec{}
		q.counts = map[qcause]int{}
	}
	q.remove(k)
	r := qrec{since: uint32(since.Unix()), reason: q.reasons.intern(reason), module: q.modules.intern(module),
		kind: kind, predicted: predicted}
	q.recs[strings.Clone(k)] = r
	q.counts[r.cause()]++
	q.version++
}

// remove forgets k; it reports whether k was quarantined.
func (q *Quarantine) remove(k string) bool {
	r, ok := q.recs[k]
	if !ok {
		return false
	}
	delete(q.recs, k)
	c := r.cause()
	if q.counts[c]--; q.counts[c] <= 0 {
		delete(q.counts, c)
	}
	q.version++
	return true
}

// addDamaged quarantines k, an entry the store found damaged.
func (q *Quarantine) addDamaged(k string, kind entry.Kind, module, reason string, since time.Time) {
	q.add(k, kind, module, reason, since, false)
	r := q.recs[k]
	r.damaged = true
	q.recs[k] = r
}

// Damaged reports whether k is quarantined as damaged in the store.
func (q *Quarantine) Damaged(k string) bool { return q.recs[k].damaged }

// reset empties the set and drops its tables.
func (q *Quarantine) reset() {
	v := q.version
	*q = Quarantine{version: v + 1}
}

func (r qrec) cause() qcause { return qcause{module: r.module, reason: r.reason, kind: r.kind} }

// Each calls fn for every quarantined key, in no order, until fn returns
// false.
func (q *Quarantine) Each(fn func(k string, predicted bool) bool) {
	for k, r := range q.recs {
		if !fn(k, r.predicted) {
			return
		}
	}
}

// QuarantineCause counts the quarantined entries of one module and kind
// refused for one reason.
type QuarantineCause struct {
	Module  string
	Kind    entry.Kind
	Reason  string
	Entries int
}

// Causes returns the counts of q, sorted by module, kind and reason.
func (q *Quarantine) Causes() []QuarantineCause {
	out := make([]QuarantineCause, 0, len(q.counts))
	for c, n := range q.counts {
		out = append(out, QuarantineCause{Module: q.modules.get(c.module), Kind: c.kind, Reason: q.reasons.get(c.reason), Entries: n})
	}
	slices.SortFunc(out, func(a, b QuarantineCause) int {
		return cmp.Or(strings.Compare(a.Module, b.Module), cmp.Compare(a.Kind, b.Kind), strings.Compare(a.Reason, b.Reason))
	})
	return out
}

// MaxListedQuarantined is the number of quarantined entries a bridge's
// status lists with their content (BridgeStatus.Quarantined); the others
// are counted (QuarantinedTotal, QuarantineCauses).
const MaxListedQuarantined = 1000

// listed is a quarantined entry a status lists, before its content is read
// from the store (Snapshot.ListQuarantined).
type listed struct {
	key       string
	reason    string
	module    string
	since     time.Time
	predicted bool
	damaged   bool
}

// sample returns up to max quarantined keys: those first for which first
// is true (entries that crashed vswitchd, so a mass refusal never hides
// them), then in key order.
func (q *Quarantine) sample(max int, first func(k string) bool) []listed {
	keys := make([]string, 0, len(q.recs))
	for k := range q.recs {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		if first != nil && first(k) {
			return 0
		}
		return 1
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b)) })
	out := make([]listed, 0, min(max, len(keys)))
	for _, k := range keys[:min(max, len(keys))] {
		r := q.recs[k]
		out = append(out, listed{key: k, reason: q.reasons.get(r.reason), module: q.modules.get(r.module),
			since: time.Unix(int64(r.since), 0), predicted: r.predicted, damaged: r.damaged})
	}
	return out
}

// Entries is what a snapshot reads its listed quarantine from
// (store.Entries).
type Entries interface {
	Get(bridge string, kind entry.Kind, id []byte) (entry.Entry, bool, error)
}

// ListQuarantined reads the quarantined entries the snapshot lists from st;
// an entry no longer stored is left out, and a damaged one (which the store
// does not return) is listed by its key and module.
func (s Snapshot) ListQuarantined(st Entries) ([]Quarantined, error) {
	bridge, ls := s.Name, s.listed
	out := make([]Quarantined, 0, len(ls))
	for _, l := range ls {
		d, ok, err := st.Get(bridge, entry.Kind(l.key[0]), []byte(l.key[1:]))
		if err != nil {
			return nil, err
		}
		switch {
		case ok:
			out = append(out, Quarantined{Bridge: bridge, Entry: d, Reason: l.reason, Since: l.since, predicted: l.predicted})
		case l.damaged:
			out = append(out, Quarantined{Bridge: bridge, Entry: entry.Entry{Kind: entry.Kind(l.key[0]), Module: l.module, ID: []byte(l.key[1:])},
				Reason: l.reason, Since: l.since, damaged: true})
		}
	}
	return out, nil
}
