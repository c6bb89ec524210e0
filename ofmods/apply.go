package ofmods

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
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

func (o *overlay) flowMod(i int, m []byte) error {
	if len(m) < flowModMin {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN, fmt.Errorf("FLOW_MOD of %d bytes", len(m)))
	}
	cmd, table := entry.FlowModCommand(m), entry.FlowModTable(m)
	// As vswitchd's ofputil_decode_flow_mod: the match, field by field,
	// then the table, then the command.
	if fields, ok := entry.FlowModMatchFields(m); ok {
		if err := ofctl.CheckMatchOrder(fields); err != nil {
			return refuse(i, openflow15.PET_BAD_MATCH, openflow15.BMC_BAD_PREREQ, err)
		}
	}
	if table == openflow15.OFPTT_ALL && cmd != flowDelete && cmd != flowDelStrict {
		return refuse(i, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_TABLE_ID, errors.New("only a delete may name every table (OFPTT_ALL)"))
	}
	// readOnly refuses an add or modify in vswitchd's own table, as its
	// add_flow_init does (after decoding the message).
	readOnly := func() error {
		if table == tableInternal {
			return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM, fmt.Errorf("table %d is vswitchd's own: read-only", table))
		}
		return nil
	}
	switch cmd {
	case flowAdd:
		e, err := canon.DecodeEntry(entry.KindFlow, m)
		if err != nil {
			return askSwitch(i, err)
		}
		if err := readOnly(); err != nil {
			return err
		}
		if err := entry.CheckDesiredFlow(e.Payload); err != nil {
			return askSwitch(i, err)
		}
		s, owner, err := o.lookup(entry.KindFlow, e.ID)
		if err != nil {
			return err
		}
		if owner != "" && owner != o.module {
			return refuse(i, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_EPERM, errOwned(entry.KindFlow, owner))
		}
		o.set(i, s, e)
		return nil
	case flowModify, flowModStrict, flowDelete, flowDelStrict:
	default:
		return refuse(i, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_BAD_COMMAND, fmt.Errorf("FLOW_MOD command %d", cmd))
	}
	del := cmd == flowDelete || cmd == flowDelStrict
	sel := m
	if !del {
		// vswitchd decodes a modify's match and instructions whatever it
		// selects, and selects by cookie alone: out_port and out_group
		// restrict deletes only (modify_flows_init_loose and _strict).
		if _, err := canon.DecodeEntry(entry.KindFlow, entry.WithFlowCommand(m, flowAdd)); err != nil {
			return askSwitch(i, err)
		}
		if err := readOnly(); err != nil {
			return err
		}
		sel = entry.WithFlowOut(m, anyOutPort, anyOutGroup)
	}
	ff, err := ofctl.FilterOf(sel)
	if err != nil {
		return askSwitch(i, err)
	}
	act := func(s *slot) error {
		if del {
			return o.remove(i, s)
		}
		e, err := canon.ModifyFlow(s.e.Payload, m)
		if err != nil {
			return askSwitch(i, err)
		}
		o.set(i, s, e)
		return nil
	}
	// Every table (OFPTT_ALL, deletes only) is every table but vswitchd's
	// hidden one.
	visible := func(s *slot) bool { return table != openflow15.OFPTT_ALL || s.e.ID[0] != tableInternal }
	if cmd == flowModify || cmd == flowDelete {
		n := 0
		err := o.each(entry.KindFlow, func(s *slot) error {
			if !visible(s) {
				return nil
			}
			ok, err := ff.Match(s.e.Payload)
			if err != nil || !ok {
				return err
			}
			n++
			return act(s)
		})
		if err != nil || !del || n > 0 {
			return err
		}
		return refuseReadOnly(i, m, ff, nil)
	}
	_, id, err := canon.DecodeDelete(entry.KindFlow, entry.WithFlowCommand(m, flowAdd))
	if err != nil {
		return askSwitch(i, err)
	}
	if table == openflow15.OFPTT_ALL {
		// A strict delete of every table deletes the flow of that priority
		// and match in each (collect_rules_strict): of the module's flows,
		// as a non-strict delete.
		n := 0
		err := o.each(entry.KindFlow, func(s *slot) error {
			if !visible(s) || !bytes.Equal(s.e.ID[1:], id[1:]) || !ff.MatchRestrictions(s.e.Payload) {
				return nil
			}
			n++
			return act(s)
		})
		if err != nil || n > 0 {
			return err
		}
		return refuseReadOnly(i, m, ff, id)
	}
	s, owner, err := o.lookup(entry.KindFlow, id)
	switch {
	case err != nil:
		return err
	case owner != "" && owner != o.module:
		return refuse(i, openflow15.ET_FLOW_MOD_FAILED, openflow15.FMFC_EPERM, errOwned(entry.KindFlow, owner))
	case s == nil || !s.present || !ff.MatchRestrictions(s.e.Payload):
		if del {
			return refuseReadOnly(i, m, ff, id)
		}
		return nil
	}
	return act(s)
}

// internalFlowText are the flows ofproto-dpif's add_internal_flows puts in
// vswitchd's hidden table, as a delete can select them (out_port reads
// the controller action of the first as an output to CONTROLLER). The
// fourth, priority=2,recirc_id=0 with no actions, needs a field a
// controller's match does not name (FilterOf refuses recirc_id).
var internalFlowText = []string{
	"table=254,priority=0,reg0=0x1,actions=CONTROLLER:65535",
	"table=254,priority=0,reg0=0x2,actions=drop",
	"table=254,priority=0,reg0=0x3,actions=drop",
}

// internalFlows are internalFlowText, parsed.
var internalFlows = sync.OnceValue(func() []entry.Entry {
	out := make([]entry.Entry, len(internalFlowText))
	for k, text := range internalFlowText {
		p, id, err := canon.Parse(entry.KindFlow, text)
		if err != nil {
			panic(fmt.Sprintf("ofmods: vswitchd's internal flow %q: %v", text, err))
		}
		out[k] = entry.Entry{Kind: entry.KindFlow, ID: id, Payload: p}
	}
	return out
})

// refuseReadOnly refuses, as vswitchd refuses it (OFPBRC_EPERM), the
// delete m that selected none of the module's flows when it selects one of
// vswitchd's read-only flows (collect_rules_loose and _strict): those of
// its hidden table, which a delete names by that table or, through the
// switch's cookie index, by cookie 0 under a full mask in every table. id
// is the identity a strict delete names, nil for a loose one. The module
// speaks as if the switch held its flows alone: another module's flows
// that the delete would select on the switch do not count.
func refuseReadOnly(i int, m []byte, ff *ofctl.FlowFilter, id []byte) error {
	table, cookie, mask := entry.FlowModTable(m), entry.FlowCookie(m), entry.FlowModCookieMask(m)
	if table != tableInternal && (table != openflow15.OFPTT_ALL || mask != ^uint64(0) || cookie != 0) {
		return nil
	}
	for _, f := range internalFlows() {
		ok := id != nil && bytes.Equal(f.ID[1:], id[1:]) && ff.MatchRestrictions(f.Payload)
		if id == nil {
			var err error
			if ok, err = ff.Match(f.Payload); err != nil {
				return askSwitch(i, err)
			}
		}
		if ok {
			return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM, errors.New("the delete selects only vswitchd's own read-only flows (table 254)"))
		}
	}
	return nil
}

// idMod is a GROUP_MOD or METER_MOD: the kind's errors and numbers.
type idMod struct {
	kind                                 entry.Kind
	failed                               uint16 // the error type
	exists, unknown, eperm               uint16 // its codes
	add, modify, delete, addOrMod, every uint32
}

var (
	groupMods = idMod{
		kind: entry.KindGroup, failed: openflow15.ET_GROUP_MOD_FAILED,
		exists: openflow15.GMFC_GROUP_EXISTS, unknown: openflow15.GMFC_UNKNOWN_GROUP, eperm: openflow15.GMFC_EPERM,
		add: groupAdd, modify: groupModify, delete: groupDelete, addOrMod: groupAddOrMod, every: openflow15.OFPG_ALL,
	}
	meterMods = idMod{
		kind: entry.KindMeter, failed: openflow15.ET_METER_MOD_FAILED,
		exists: openflow15.MMFC_METER_EXISTS, unknown: openflow15.MMFC_UNKNOWN_METER,
		add: meterAdd, modify: meterModify, delete: meterDelete, addOrMod: 1 << 31, every: openflow15.M_ALL,
	}
)

// refuseOwned refuses a change to another module's group or meter; a meter
// mod has no EPERM of its own, so it gets the request's.
func (k idMod) refuseOwned(i int, owner string) *Refusal {
	if k.eperm == 0 {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM, errOwned(k.kind, owner))
	}
	return refuse(i, k.failed, k.eperm, errOwned(k.kind, owner))
}

func (o *overlay) groupMod(i int, m []byte) error {
	if len(m) < groupModMin {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN, fmt.Errorf("GROUP_MOD of %d bytes", len(m)))
	}
	cmd := entry.ModCommand(m)
	if groupCommandKnown(cmd) {
		if err := checkGroupMod(i, m); err != nil {
			return err
		}
	}
	switch cmd {
	case groupInsert, groupRemove:
		s, owner, err := o.lookup(entry.KindGroup, entry.ModID(m))
		switch {
		case err != nil:
			return err
		case owner != "" && owner != o.module:
			return groupMods.refuseOwned(i, owner)
		case s == nil || !s.present:
			return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_GROUP, errors.New("no such group"))
		}
		var e entry.Entry
		if cmd == groupInsert {
			e, err = canon.InsertBuckets(s.e.Payload, m)
		} else {
			gm, _ := entry.ReadGroupMod(m) // checkGroupMod checked its bucket array
			e, err = canon.RemoveBuckets(s.e.Payload, gm.CommandBucket)
		}
		switch {
		case errors.Is(err, canon.ErrUnknownBucket):
			return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_BUCKET, err)
		case errors.Is(err, canon.ErrBucketExists):
			return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BUCKET_EXISTS, err)
		case err != nil:
			return askSwitch(i, err)
		}
		o.set(i, s, e)
		return nil
	}
	return o.idMod(i, m, groupMods)
}

func (o *overlay) meterMod(i int, m []byte) error {
	if len(m) < modMin {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN, fmt.Errorf("METER_MOD of %d bytes", len(m)))
	}
	return o.idMod(i, m, meterMods)
}

// idMod applies a GROUP_MOD or METER_MOD add, modify or delete.
func (o *overlay) idMod(i int, m []byte, k idMod) error {
	cmd, id, n := uint32(entry.ModCommand(m)), entry.ModID(m), modID(k.kind, m)
	var e entry.Entry
	switch cmd {
	case k.delete:
		if n == k.every {
			return o.each(k.kind, func(s *slot) error { return o.remove(i, s) })
		}
	case k.add, k.modify, k.addOrMod:
		// vswitchd decodes the message before it checks the id and looks
		// at its groups or meters. A group id past OFPG_MAX is none it
		// holds: a modify finds no group, an add refuses the id
		// (init_group).
		if k.kind == entry.KindGroup && n > openflow15.OFPG_MAX {
			if cmd == k.modify {
				return refuse(i, k.failed, k.unknown, fmt.Errorf("no %s %#x", k.kind, n))
			}
			return refuse(i, k.failed, openflow15.GMFC_INVALID_GROUP, fmt.Errorf("%s id %#x is reserved", k.kind, n))
		}
		var err error
		if e, err = canon.DecodeEntry(k.kind, entry.WithCommand(m, uint16(k.add))); err != nil {
			return askSwitch(i, err)
		}
		if k.kind == entry.KindMeter {
			if err := ofctl.CheckMeterID(n); err != nil {
				return refuse(i, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_INVALID_METER, err)
			}
		}
	default:
		return askSwitch(i, fmt.Errorf("%s command %d", k.kind, cmd))
	}
	s, owner, err := o.lookup(k.kind, id)
	if err != nil {
		return err
	}
	if owner != "" && owner != o.module {
		return k.refuseOwned(i, owner)
	}
	present := s != nil && s.present
	switch cmd {
	case k.delete:
		if present {
			return o.remove(i, s)
		}
		return nil
	case k.add:
		if present {
			return refuse(i, k.failed, k.exists, fmt.Errorf("%s %d exists", k.kind, n))
		}
	case k.modify:
		if !present {
			return refuse(i, k.failed, k.unknown, fmt.Errorf("no %s %d", k.kind, n))
		}
	}
	o.set(i, s, e)
	return nil
}
