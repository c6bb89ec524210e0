package entry

import (
	"bytes"
	"encoding/binary"
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

// Ref is a group or meter a flow uses.
type Ref struct {
	Kind Kind
	ID   uint32
}

// Key returns the identity bytes of the group or meter r names.
func (r Ref) Key() []byte { return binary.BigEndian.AppendUint32(nil, r.ID) }

func (r Ref) String() string { return fmt.Sprintf("%s %d", r.Kind, r.ID) }
