package plan

import (
	"bytes"
	"fmt"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/store"
)

// Op is what a change does on the switch.
type Op int

// The operations of a change.
const (
	OpAdd Op = iota + 1
	OpModify
	OpDelete
)

func (o Op) String() string {
	switch o {
	case OpAdd:
		return "add"
	case OpModify:
		return "modify"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Change is one difference between the desired state and the switch.
type Change struct {
	Op   Op
	Kind entry.Kind
	// Desired is the declared entry (zero for OpDelete).
	Desired entry.Entry
	// Actual is the canonical ADD of what the switch holds (nil for OpAdd);
	// for a write, what the store held before it.
	Actual []byte
	// Index is the entry's position in a write request, -1 in a replay.
	Index int
	// Foreign marks an entry outside the owned cookie space that a replay
	// restores from the bridge's mirror (package restore's cookie.go).
	Foreign bool
}

// ID is the identity of the entry the change touches.
func (c Change) ID() []byte {
	if c.Op == OpDelete {
		_, id, err := entry.Identify(c.Kind, c.Actual)
		if err == nil {
			return id
		}
	}
	return c.Desired.ID
}

// Messages are the OpenFlow messages that perform c, in order: one, or for a
// group larger than one message its ADD or MODIFY and INSERT_BUCKETs
// (canon.Messages), which must share a bundle.
func (c Change) Messages() []ofconn.Message {
	switch {
	case c.Op != OpDelete:
		return toMessages(canon.Messages(c.Kind, c.Op == OpModify, c.Desired.Payload))
	case c.Kind == entry.KindFlow:
		return []ofconn.Message{entry.DeleteFlowStrict(c.Actual)}
	case c.Kind == entry.KindGroup:
		return []ofconn.Message{entry.DeleteGroup(entry.ModID(c.Actual))}
	default:
		return []ofconn.Message{entry.DeleteMeter(entry.ModID(c.Actual))}
	}
}

func toMessages(bs [][]byte) []ofconn.Message {
	ms := make([]ofconn.Message, len(bs))
	for i, b := range bs {
		ms[i] = b
	}
	return ms
}

// SendOrder is a set of changes in an order OVS accepts:
//   - meters before the bundle (OVS cannot bundle METER_MOD), their deletes
//     after it (deleting a meter deletes the flows that use it);
//   - in the bundle: groups added or modified, then flows deleted, then flows
//     added or modified, then groups deleted (deleting a group deletes the
//     flows that use it, so they must be gone or changed first).
type SendOrder struct {
	Pre, Bundle, Post []Change
}

// Len is the number of changes of p.
func (p *SendOrder) Len() int { return len(p.Pre) + len(p.Bundle) + len(p.Post) }

// Changes are the changes of p, in their order.
func (p *SendOrder) Changes() []Change {
	out := make([]Change, 0, p.Len())
	out = append(out, p.Pre...)
	out = append(out, p.Bundle...)
	return append(out, p.Post...)
}

// NewSendOrder puts cs in the order the switch takes them.
func NewSendOrder(cs []Change) *SendOrder {
	var p SendOrder
	// One pass per part of the bundle, appending to one slice: a write of a
	// million flows holds its changes once, not once per part and again
	// for the whole.
	class := func(c Change) int {
		switch {
		case c.Kind == entry.KindMeter && c.Op == OpDelete:
			return -2
		case c.Kind == entry.KindMeter:
			return -1
		case c.Kind == entry.KindGroup && c.Op == OpDelete:
			return 3
		case c.Kind == entry.KindGroup:
			return 0
		case c.Op == OpDelete:
			return 1
		default:
			return 2
		}
	}
	n, ordered := 0, true
	for i, c := range cs {
		switch k := class(c); k {
		case -2:
			p.Post = append(p.Post, c)
		case -1:
			p.Pre = append(p.Pre, c)
		default:
			n++
			ordered = ordered && (i == 0 || class(cs[i-1]) <= k)
		}
	}
	if ordered && n == len(cs) {
		// The common large write: flows only, already in order.
		p.Bundle = cs
		return &p
	}
	p.Bundle = make([]Change, 0, n)
	for part := range 4 {
		for _, c := range cs {
			if class(c) == part {
				p.Bundle = append(p.Bundle, c)
			}
		}
	}
	return &p
}

// ActualEntry is one entry the switch holds, in canonical form.
type ActualEntry struct {
	Kind    entry.Kind
	ID      []byte
	Payload []byte
}

// Diff compares the desired entries with what the switch holds. Entries in
// skip (quarantined) count as not desired.
func Diff(desired []entry.Entry, actual []ActualEntry, skip map[string]bool) []Change {
	want := make(map[string]entry.Entry, len(desired))
	for _, d := range desired {
		k := Key(d.Kind, d.ID)
		if !skip[k] {
			want[k] = d
		}
	}
	have := make(map[string]bool, len(actual))
	var cs []Change
	for _, a := range actual {
		k := Key(a.Kind, a.ID)
		have[k] = true
		d, ok := want[k]
		switch {
		case !ok:
			cs = append(cs, Change{Op: OpDelete, Kind: a.Kind, Actual: a.Payload, Index: -1})
		case !bytes.Equal(entry.Comparable(d.Kind, d.Payload), entry.Comparable(a.Kind, a.Payload)):
			cs = append(cs, Change{Op: OpModify, Kind: a.Kind, Desired: d, Actual: a.Payload, Index: -1})
		}
	}
	for _, d := range desired {
		k := Key(d.Kind, d.ID)
		if _, ok := want[k]; ok && !have[k] {
			cs = append(cs, Change{Op: OpAdd, Kind: d.Kind, Desired: d, Index: -1})
		}
	}
	return cs
}

// AppendWriteChanges appends to cs the switch changes of a write (as the
// store reports them); removed entries become deletes.
func AppendWriteChanges(cs []Change, changed []store.Change, removed []entry.Entry) []Change {
	for _, r := range removed {
		cs = append(cs, Change{Op: OpDelete, Kind: r.Kind, Actual: r.Payload, Index: -1})
	}
	for _, c := range changed {
		cs = append(cs, WriteChange(c))
	}
	return cs
}

// WriteChange is the change a write makes of an entry the store changed.
func WriteChange(c store.Change) Change {
	op := OpAdd
	if c.Existed {
		op = OpModify
	}
	return Change{Op: op, Kind: c.Entry.Kind, Desired: c.Entry, Actual: c.Old, Index: c.Index}
}

// Key is the map key of an entry's identity: its kind, then its ID.
func Key(k entry.Kind, id []byte) string { return string(append([]byte{byte(k)}, id...)) }
