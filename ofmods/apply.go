package ofmods

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
)

// Store is what Apply reads: the stored entries of one bridge.
type Store interface {
	// Get returns the entry stored under kind and id, whichever module
	// owns it.
	Get(kind entry.Kind, id []byte) (entry.Entry, bool, error)
	// Each calls fn for every stored entry of kind of the module Apply
	// runs for.
	Each(kind entry.Kind, fn func(entry.Entry) error) error
}

// Refusal is a message of the change that vswitchd would refuse, and so
// the change: Type and Code are the OFPT_ERROR vswitchd sends for it, or 0
// when only the switch can tell (a message this package cannot decode).
type Refusal struct {
	Index      int
	Type, Code uint16
	Err        error
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("ofmods: message %d refused: %v", r.Index, r.Err)
}

func (r *Refusal) Unwrap() error { return r.Err }

// Change is the net effect of a controller's messages on its module's
// entries.
type Change struct {
	// Put are the module's entries the messages added or rewrote, with
	// their final content (an entry rewritten as it was is here too: the
	// store finds it unchanged). Delete are the stored entries they
	// removed (Kind and ID).
	Put, Delete []entry.Entry
	// PutFrom and DeleteFrom are the index of the message that decided
	// Put[i] and Delete[i].
	PutFrom, DeleteFrom []int
}

// OpenFlow 1.5 numbers Apply reads.
const (
	anyOutPort    = 0xffffffff
	anyOutGroup   = 0xffffffff
	tableInternal = 254 // vswitchd's hidden, read-only table
	flowModMin    = 56
	modMin        = 16
	groupModMin   = entry.GroupModFixed
	flowAdd       = 0
	flowModify    = 1
	flowModStrict = 2
	flowDelete    = 3
	flowDelStrict = 4
	groupAdd      = 0
	groupModify   = 1
	groupDelete   = 2
	groupInsert   = 3
	groupRemove   = 5
	groupAddOrMod = 0x8000 // OVS's extension
	meterAdd      = 0
	meterModify   = 1
	meterDelete   = 2
)

// Apply runs msgs, in order, against the entries of module that st holds,
// and returns their net effect. A message vswitchd would refuse refuses
// the whole change: the error is a *Refusal naming it. Other errors are
// the store's.
func Apply(module string, st Store, msgs [][]byte) (*Change, error) {
	o := &overlay{module: module, st: st, slots: make(map[string]*slot)}
	for i, m := range msgs {
		var err error
		switch {
		case len(m) < 8 || m[0] != openflow15.VERSION:
			err = refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_VERSION, errors.New("not an OpenFlow 1.5 message"))
		case m[1] == openflow15.Type_FlowMod:
			err = o.flowMod(i, m)
		case m[1] == openflow15.Type_GroupMod:
			err = o.groupMod(i, m)
		case m[1] == openflow15.Type_MeterMod:
			err = o.meterMod(i, m)
		default:
			err = refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_TYPE, fmt.Errorf("message type %d is not a flow, group or meter change", m[1]))
		}
		if err != nil {
			return nil, err
		}
	}
	return o.change(), nil
}

func refuse(i int, typ, code uint16, err error) *Refusal {
	return &Refusal{Index: i, Type: typ, Code: code, Err: err}
}

// askSwitch refuses message i for a reason only the switch can put in its
// own words.
func askSwitch(i int, err error) *Refusal { return &Refusal{Index: i, Err: err} }

// slot is one identity the messages touched.
type slot struct {
	e       entry.Entry
	present bool // the module holds it after the messages so far
	stored  bool // the store held it, for the module, before them
	changed bool
	from    int
}

// overlay is the module's entries as the messages so far left them: the
// slots they touched over what the store holds.
type overlay struct {
	module string
	st     Store
	slots  map[string]*slot
	order  []string // slot keys in the order first touched
	loaded [entry.KindMeter + 1]bool
}

func slotKey(kind entry.Kind, id []byte) string { return string(append([]byte{byte(kind)}, id...)) }

// lookup returns the slot of an identity, reading the store the first
// time; nil with the owner when another module owns it, nil and "" when
// nobody holds it.
func (o *overlay) lookup(kind entry.Kind, id []byte) (*slot, string, error) {
	k := slotKey(kind, id)
	if s := o.slots[k]; s != nil {
		return s, o.module, nil
	}
	e, ok, err := o.st.Get(kind, id)
	if err != nil {
		return nil, "", err
	}
	switch {
	case !ok:
		return nil, "", nil
	case e.Module != o.module:
		return nil, e.Module, nil
	}
	return o.track(k, e), o.module, nil
}

// track adds a slot for a stored entry of the module.
func (o *overlay) track(k string, e entry.Entry) *slot {
	s := &slot{e: e, present: true, stored: true, from: -1}
	o.slots[k] = s
	o.order = append(o.order, k)
	return s
}

// set gives identity e.ID the content e, decided by message i; owner is
// what lookup returned.
func (o *overlay) set(i int, s *slot, e entry.Entry) {
	if s == nil {
		k := slotKey(e.Kind, e.ID)
		s = &slot{from: i}
		o.slots[k] = s
		o.order = append(o.order, k)
	}
	e.Module = o.module
	s.e, s.present, s.changed, s.from = e, true, true, i
}

// remove deletes what s holds, by message i. A group or meter takes the
// module's flows that use it along, as vswitchd deletes them.
func (o *overlay) remove(i int, s *slot) error {
	if !s.present {
		return nil
	}
	s.present, s.changed, s.from = false, true, i
	if s.e.Kind == entry.KindFlow {
		return nil
	}
	ref := entry.Ref{Kind: s.e.Kind, ID: binary.BigEndian.Uint32(s.e.ID)}
	return o.each(entry.KindFlow, func(f *slot) error {
		if slices.Contains(entry.FlowRefs(f.e.Payload), ref) {
			f.present, f.changed, f.from = false, true, i
		}
		return nil
	})
}

// each calls fn for every entry of kind the module holds now, reading the
// store's the first time.
func (o *overlay) each(kind entry.Kind, fn func(*slot) error) error {
	if !o.loaded[kind] {
		err := o.st.Each(kind, func(e entry.Entry) error {
			if k := slotKey(kind, e.ID); o.slots[k] == nil {
				o.track(k, e)
			}
			return nil
		})
		if err != nil {
			return err
		}
		o.loaded[kind] = true
	}
	for _, k := range o.order {
		if s := o.slots[k]; s.present && s.e.Kind == kind {
			if err := fn(s); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o *overlay) change() *Change {
	c := &Change{}
	for _, k := range o.order {
		switch s := o.slots[k]; {
		case !s.changed:
		case s.present:
			c.Put, c.PutFrom = append(c.Put, s.e), append(c.PutFrom, s.from)
		case s.stored:
			c.Delete = append(c.Delete, entry.Entry{Kind: s.e.Kind, Module: o.module, ID: s.e.ID})
			c.DeleteFrom = append(c.DeleteFrom, s.from)
		}
	}
	return c
}

// errOwned is the reason of a refused change to another module's entry.
func errOwned(kind entry.Kind, owner string) error {
	return fmt.Errorf("the %s belongs to module %q", kind, owner)
}
