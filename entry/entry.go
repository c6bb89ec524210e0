package entry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
)

// Kind is the kind of an entry.
type Kind uint8

// The kinds, numbered as in the API (EntryKind).
const (
	KindFlow  Kind = 1
	KindGroup Kind = 2
	KindMeter Kind = 3
)

// Kinds lists every valid kind, in replay order of the store's buckets.
var Kinds = []Kind{KindFlow, KindGroup, KindMeter}

func (k Kind) String() string {
	switch k {
	case KindFlow:
		return "flow"
	case KindGroup:
		return "group"
	case KindMeter:
		return "meter"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of the kinds.
func (k Kind) Valid() bool { return k >= KindFlow && k <= KindMeter }

// Entry is one desired entry of one bridge.
type Entry struct {
	// Kind is required and immutable.
	Kind Kind
	// Module owns the entry; required.
	Module string
	// ID is the identity within (bridge, kind); derived from Payload.
	ID []byte
	// Payload is the canonical OpenFlow 1.5 message, command ADD, xid 0. The
	// groups and meters a flow uses (FlowRefs) must be declared on the same
	// bridge.
	Payload []byte
	// Opaque is set by package canon when part of Payload is kept as the
	// controller sent it, so the engine learns the switch's form of it after
	// the write (canon.Forms). It is not stored: false for entries read
	// from the store.
	Opaque bool
}

// Equal reports whether a and b describe the same entry with the same content.
func (e Entry) Equal(o Entry) bool {
	return e.Kind == o.Kind && e.Module == o.Module && bytes.Equal(e.ID, o.ID) && bytes.Equal(e.Payload, o.Payload)
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidateName checks a bridge or module name: 1 to 63 characters of letters,
// digits, '_', '.', '-', starting with a letter or digit.
func ValidateName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%s name is required", what)
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%s name %q: want 1-63 characters of [A-Za-z0-9_.-] starting with a letter or digit", what, name)
	}
	return nil
}

// OpenFlow 1.5 constants used on raw bytes.
const (
	ofVersion15      = 0x06
	typeFlowMod      = 14
	typeGroupMod     = 15
	typeMeterMod     = 29
	headerLen        = 8
	flowCmdAdd       = 0
	flowCmdDelStrict = 4
	// MaxMessage is the largest OpenFlow message an entry is sent in:
	// lengths are 16 bits, and a BUNDLE_ADD wraps the message in 16 more
	// bytes.
	MaxMessage = 65535 - 16
	// MaxPayload is the largest entry: a flow or a meter is one message of
	// at most MaxMessage bytes; a group that does not fit in one is a
	// sequence of messages (package canon), at most MaxPayload bytes in all,
	// about 13,000 buckets of Antrea's Service groups.
	MaxPayload = 1 << 20
)

// SplitMessages splits b into the OpenFlow messages it holds back to back,
// each of at least a header and at most MaxMessage bytes. The messages share
// b's memory.
func SplitMessages(b []byte) ([][]byte, error) {
	var out [][]byte
	for off := 0; off < len(b); {
		if len(b)-off < headerLen {
			return nil, fmt.Errorf("message %d at byte %d: %d bytes are shorter than an OpenFlow header", len(out), off, len(b)-off)
		}
		if b[off] != ofVersion15 {
			return nil, fmt.Errorf("message %d at byte %d: OpenFlow version 0x%02x, want 0x06 (OpenFlow 1.5)", len(out), off, b[off])
		}
		l := int(binary.BigEndian.Uint16(b[off+offLength:]))
		if l < headerLen || off+l > len(b) {
			return nil, fmt.Errorf("message %d at byte %d: header length %d does not fit in the %d bytes given", len(out), off, l, len(b)-off)
		}
		if l > MaxMessage {
			return nil, fmt.Errorf("message %d of %d bytes exceeds the %d-byte limit of a bundled message", len(out), l, MaxMessage)
		}
		out = append(out, b[off:off+l:off+l])
		off += l
	}
	return out, nil
}

// Identify checks that payload is one OpenFlow 1.5 message of the kind with
// command ADD (for a group, the ADD may be followed by the INSERT_BUCKET
// messages of a group larger than one message), and returns a copy with
// xid 0 and its identity.
func Identify(kind Kind, payload []byte) (canonical, id []byte, err error) {
	if err := checkMessage(kind, payload); err != nil {
		return nil, nil, err
	}
	return identify(kind, bytes.Clone(payload))
}

// IdentifyOwned is Identify of a message nothing else holds (one its caller
// has just built): the canonical payload is b itself, its xid set to 0 in
// place and its capacity cut to its length, not a copy. Same checks, same
// errors.
func IdentifyOwned(kind Kind, b []byte) (canonical, id []byte, err error) {
	if err := checkMessage(kind, b); err != nil {
		return nil, nil, err
	}
	return identify(kind, b[:len(b):len(b)])
}

// CheckFlow reports why Identify would refuse b as a flow, without a copy:
// nil when it takes it.
func CheckFlow(b []byte) error {
	if err := checkMessage(KindFlow, b); err != nil {
		return err
	}
	return checkFlowMod(b)
}

// checkMessage checks the OpenFlow header of an entry of kind.
func checkMessage(kind Kind, payload []byte) error {
	if len(payload) < headerLen {
		return fmt.Errorf("message of %d bytes is shorter than an OpenFlow header", len(payload))
	}
	if limit := maxSize(kind); len(payload) > limit {
		return fmt.Errorf("%s of %d bytes exceeds the %d-byte limit", kind, len(payload), limit)
	}
	if payload[0] != ofVersion15 {
		return fmt.Errorf("OpenFlow version 0x%02x, want 0x06 (OpenFlow 1.5)", payload[0])
	}
	if l := int(binary.BigEndian.Uint16(payload[offLength:])); l != len(payload) {
		if kind != KindGroup || l > len(payload) {
			return fmt.Errorf("header length %d does not match the %d bytes given", l, len(payload))
		}
		msgs, err := SplitMessages(payload)
		if err != nil {
			return err
		}
		for i, m := range msgs[1:] {
			if m[1] != typeGroupMod || len(m) < modFixed || binary.BigEndian.Uint16(m[offModCommand:]) != cmdInsertBucket ||
				!bytes.Equal(ModID(m), ModID(payload)) {
				return fmt.Errorf("message %d after the group's ADD is not an INSERT_BUCKET of the same group", i+1)
			}
		}
	}
	return nil
}

// identify zeroes the xid of a checked message and computes its identity.
func identify(kind Kind, canonical []byte) ([]byte, []byte, error) {
	binary.BigEndian.PutUint32(canonical[offXID:], 0)
	var id []byte
	var err error
	switch kind {
	case KindFlow:
		id, err = flowID(canonical)
	case KindGroup:
		id, err = fixedID(canonical, typeGroupMod, "GROUP_MOD")
	case KindMeter:
		id, err = fixedID(canonical, typeMeterMod, "METER_MOD")
	default:
		err = fmt.Errorf("invalid entry kind %d", kind)
	}
	if err != nil {
		return nil, nil, err
	}
	return canonical, id, nil
}

// maxSize is the largest entry of a kind: one message, or for a group the
// messages of a large group.
func maxSize(kind Kind) int {
	if kind == KindGroup {
		return MaxPayload
	}
	return MaxMessage
}

// flowID is FlowID of a message whose header was checked.
func flowID(b []byte) ([]byte, error) {
	if err := checkFlowMod(b); err != nil {
		return nil, err
	}
	mlen := int(binary.BigEndian.Uint16(b[flowModFixed+2:]))
	return AppendFlowID(make([]byte, 0, 3+mlen-4), b), nil
}

// checkFlowMod checks what flowID reads of a FLOW_MOD ADD.
func checkFlowMod(b []byte) error {
	if b[1] != typeFlowMod {
		return fmt.Errorf("message type %d, want FLOW_MOD (14)", b[1])
	}
	if len(b) < flowModFixed+4 {
		return fmt.Errorf("FLOW_MOD of %d bytes is truncated", len(b))
	}
	if b[offFlowCommand] != flowCmdAdd {
		return fmt.Errorf("FLOW_MOD command %d, want ADD (0)", b[offFlowCommand])
	}
	mlen := int(binary.BigEndian.Uint16(b[flowModFixed+2:]))
	if mlen < 4 || flowModFixed+pad8(mlen) > len(b) {
		return fmt.Errorf("FLOW_MOD match length %d does not fit in %d bytes", mlen, len(b))
	}
	return nil
}

// fixedID returns a copy of the id of a GROUP_MOD or METER_MOD ADD.
func fixedID(b []byte, typ byte, name string) ([]byte, error) {
	if b[1] != typ {
		return nil, fmt.Errorf("message type %d, want %s (%d)", b[1], name, typ)
	}
	if len(b) < modFixed {
		return nil, fmt.Errorf("%s of %d bytes is truncated", name, len(b))
	}
	if cmd := binary.BigEndian.Uint16(b[offModCommand:]); cmd != 0 {
		return nil, fmt.Errorf("%s command %d, want ADD (0)", name, cmd)
	}
	return bytes.Clone(ModID(b)), nil
}

func pad8(n int) int { return (n + 7) &^ 7 }

// FlowTable returns the table of a flow identity.
func FlowTable(id []byte) uint8 {
	if len(id) == 0 {
		return 0
	}
	return id[0]
}

// FlowPriority returns the priority of a flow identity, 0 when id is too
// short to hold one.
func FlowPriority(id []byte) uint16 {
	if len(id) < 3 {
		return 0
	}
	return binary.BigEndian.Uint16(id[1:3])
}

// DeleteFlowStrict returns a FLOW_MOD DELETE_STRICT for the flow whose
// canonical ADD payload is given: same table, priority and match, any out port
// and group, no instructions. It is built on bytes because libOpenflow writes
// out_port into the out_group field of a FlowMod.
func DeleteFlowStrict(add []byte) []byte {
	return DeleteFlowByMatch(FlowModTable(add), FlowModPriority(add), FlowMatch(add))
}

// FlowMatch returns the ofp_match (header, fields and padding) of a
// canonical FLOW_MOD.
func FlowMatch(fm []byte) []byte {
	mlen := int(binary.BigEndian.Uint16(fm[flowModFixed+2:]))
	return fm[flowModFixed : flowModFixed+pad8(mlen)]
}

// DeleteFlowByMatch returns a FLOW_MOD DELETE_STRICT for the flow of table and
// priority with the given ofp_match (header, fields and padding).
func DeleteFlowByMatch(table uint8, priority uint16, match []byte) []byte {
	return flowByMatch(flowCmdDelStrict, table, priority, match)
}

// FlowProbe returns the FLOW_MOD ADD of a flow's identity alone: table,
// priority and an OXM match of fields (nil for the empty match), no
// instructions.
func FlowProbe(table uint8, priority uint16, fields []byte) []byte {
	match := make([]byte, 4, 4+len(fields))
	binary.BigEndian.PutUint16(match, matchOXM)
	binary.BigEndian.PutUint16(match[2:], uint16(4+len(fields)))
	return flowByMatch(flowCmdAdd, table, priority, append(match, fields...))
}

// flowByMatch returns a FLOW_MOD of command cmd, no instructions, for the
// flow of table and priority with the given ofp_match (header and fields;
// padded here to 8 bytes).
func flowByMatch(cmd, table uint8, priority uint16, match []byte) []byte {
	n := flowModFixed + pad8(len(match))
	m := make([]byte, n)
	m[0], m[1] = ofVersion15, typeFlowMod
	binary.BigEndian.PutUint16(m[offLength:], uint16(n))
	m[offTable] = table
	m[offFlowCommand] = cmd
	binary.BigEndian.PutUint16(m[offPriority:], priority)
	binary.BigEndian.PutUint32(m[offBufferID:], noBuffer)
	binary.BigEndian.PutUint32(m[offOutPort:], portAny)
	binary.BigEndian.PutUint32(m[offOutGroup:], groupAny)
	copy(m[flowModFixed:], match)
	return m
}

// OpenFlow 1.5 GROUP_MOD and METER_MOD commands.
const (
	cmdModify       = 1
	cmdDelete       = 2
	cmdInsertBucket = 3
)

// WithModify returns a copy of a canonical GROUP_MOD or METER_MOD ADD with
// command MODIFY: ADD fails for an id the switch already has.
func WithModify(add []byte) []byte { return WithCommand(add, cmdModify) }

// WithCommand returns a copy of a GROUP_MOD or METER_MOD with command cmd.
func WithCommand(m []byte, cmd uint16) []byte {
	m = bytes.Clone(m)
	binary.BigEndian.PutUint16(m[offModCommand:], cmd)
	return m
}

// WithFlowCommand returns a copy of a FLOW_MOD with command cmd. m must
// hold at least the fixed part of a FLOW_MOD.
func WithFlowCommand(m []byte, cmd uint8) []byte {
	m = bytes.Clone(m)
	m[offFlowCommand] = cmd
	return m
}

// WithFlowOut returns a copy of a FLOW_MOD with out_port and out_group
// port and group. m must hold at least the fixed part of a FLOW_MOD.
func WithFlowOut(m []byte, port, group uint32) []byte {
	m = bytes.Clone(m)
	binary.BigEndian.PutUint32(m[offOutPort:], port)
	binary.BigEndian.PutUint32(m[offOutGroup:], group)
	return m
}

// DeleteGroup returns a GROUP_MOD DELETE of the group with identity id.
func DeleteGroup(id []byte) []byte {
	m := make([]byte, 24)
	m[0], m[1] = ofVersion15, typeGroupMod
	binary.BigEndian.PutUint16(m[offLength:], 24)
	binary.BigEndian.PutUint16(m[offModCommand:], cmdDelete)
	copy(m[offModID:modFixed], id)
	binary.BigEndian.PutUint32(m[20:], 0xffffffff) // command_bucket_id: all
	return m
}

// DeleteMeter returns a METER_MOD DELETE of the meter with identity id.
func DeleteMeter(id []byte) []byte {
	m := make([]byte, 16)
	m[0], m[1] = ofVersion15, typeMeterMod
	binary.BigEndian.PutUint16(m[offLength:], modFixed)
	binary.BigEndian.PutUint16(m[offModCommand:], cmdDelete)
	copy(m[offModID:modFixed], id)
	return m
}

// Ref is a group or meter a flow uses.
type Ref struct {
	Kind Kind
	ID   uint32
}

// Key returns the identity bytes of the group or meter r names.
func (r Ref) Key() []byte { return binary.BigEndian.AppendUint32(nil, r.ID) }

func (r Ref) String() string { return fmt.Sprintf("%s %d", r.Kind, r.ID) }

// ofpmfBurst is the METER_MOD flag that makes band burst sizes meaningful.
const ofpmfBurst = 0x4

// Comparable returns the form of a canonical payload that desired and dumped
// entries are compared in. It is the payload itself, except for a meter
// without the burst flag: the datapath then reports each band's burst size as
// it chose (the userspace datapath: the rate), so burst sizes are zeroed.
func Comparable(kind Kind, payload []byte) []byte {
	if kind != KindMeter || len(payload) < 16 || binary.BigEndian.Uint16(payload[10:])&ofpmfBurst != 0 {
		return payload
	}
	m := bytes.Clone(payload)
	for off := 16; off+12 <= len(m); {
		n := int(binary.BigEndian.Uint16(m[off+2:]))
		if n < 12 || off+n > len(m) {
			break
		}
		binary.BigEndian.PutUint32(m[off+8:], 0)
		off += n
	}
	return m
}

// OpenFlow 1.5 instruction and action types FlowRefs reads.
const (
	instrWriteActions = 3
	instrApplyActions = 4
	actionGroup       = 22
	actionMeter       = 29
)

// FlowRefs returns the groups and meters the actions of a canonical FLOW_MOD
// use (group and meter actions in apply_actions and write_actions), read from
// the bytes. A malformed payload yields what could be read.
func FlowRefs(payload []byte) []Ref {
	if len(payload) < flowModFixed+4 {
		return nil
	}
	var refs []Ref
	at := flowModFixed + pad8(int(binary.BigEndian.Uint16(payload[flowModFixed+2:])))
	if at > len(payload) {
		return nil // a match longer than the message
	}
	b := payload[at:]
	for len(b) >= 4 {
		typ, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if n < 4 || n > len(b) {
			break
		}
		if (typ == instrApplyActions || typ == instrWriteActions) && n >= 8 {
			for a := b[8:n]; len(a) >= 8; {
				at, an := binary.BigEndian.Uint16(a), int(binary.BigEndian.Uint16(a[2:]))
				if an < 8 || an > len(a) {
					break
				}
				switch at {
				case actionGroup:
					refs = append(refs, Ref{Kind: KindGroup, ID: binary.BigEndian.Uint32(a[4:])})
				case actionMeter:
					refs = append(refs, Ref{Kind: KindMeter, ID: binary.BigEndian.Uint32(a[4:])})
				}
				a = a[an:]
			}
		}
		b = b[n:]
	}
	return refs
}

// FlowDrops reports whether a canonical FLOW_MOD drops what it matches: no
// instruction, or only action lists that are empty (ovs-ofctl's "drop").
// A malformed payload is not a drop.
func FlowDrops(payload []byte) bool {
	if len(payload) < flowModFixed+4 {
		return false
	}
	at := flowModFixed + pad8(int(binary.BigEndian.Uint16(payload[flowModFixed+2:])))
	if at > len(payload) {
		return false
	}
	for b := payload[at:]; len(b) > 0; {
		if len(b) < 4 {
			return false
		}
		typ, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if n < 8 || n > len(b) || (typ != instrApplyActions && typ != instrWriteActions) || n != 8 {
			return false
		}
		b = b[n:]
	}
	return true
}

// OpenFlow 1.5 flow_mod flags (OFPFF_*).
const (
	ffSendFlowRem  = 1 << 0
	ffCheckOverlap = 1 << 1
	ffResetCounts  = 1 << 2
	ffNoPktCounts  = 1 << 3
	ffNoBytCounts  = 1 << 4
	noBuffer       = 0xffffffff
)

// CheckDesiredFlow refuses the parts of a FLOW_MOD ADD that are not desired
// state: what would make the switch drop or change the flow by itself, or
// is an instruction for the one modification rather than a property of the
// flow. A desired flow must stay on the switch as declared, or flowstate
// would report drift for ever (or restore it for ever). Kept: cookie,
// importance, no_packet_counts and no_byte_counts (OVS stores them and dumps
// them back). payload must have passed Identify as a flow.
func CheckDesiredFlow(payload []byte) error {
	if len(payload) < flowModFixed {
		return fmt.Errorf("FLOW_MOD of %d bytes is truncated", len(payload))
	}
	if v := binary.BigEndian.Uint16(payload[offIdle:]); v != 0 {
		return fmt.Errorf("idle_timeout=%d: flows that expire are not desired state: the switch would lose them and flowstate would report drift for ever", v)
	}
	if v := binary.BigEndian.Uint16(payload[offHard:]); v != 0 {
		return fmt.Errorf("hard_timeout=%d: flows that expire are not desired state: the switch would lose them and flowstate would report drift for ever", v)
	}
	if v := binary.BigEndian.Uint32(payload[offBufferID:]); v != noBuffer {
		return fmt.Errorf("buffer_id=%d: a buffered packet belongs to one packet-in, not to desired state: want none (0xffffffff)", v)
	}
	flags := binary.BigEndian.Uint16(payload[offFlags:])
	switch {
	case flags&ffSendFlowRem != 0:
		return errors.New("send_flow_rem: flow-removed messages would go to flowstated, which has no use for them: desired flows are removed only by their module")
	case flags&ffCheckOverlap != 0:
		return errors.New("check_overlap: an add-time check, not state: a replay would be refused whenever another flow overlaps, and the flow would be missing")
	case flags&ffResetCounts != 0:
		return errors.New("reset_counts: an instruction for one modification, not state: every replay that modifies the flow would reset its counters")
	case flags&^(ffNoPktCounts|ffNoBytCounts) != 0:
		return fmt.Errorf("flags 0x%x: not OpenFlow 1.5 flow_mod flags", flags&^(ffNoPktCounts|ffNoBytCounts))
	}
	return nil
}
