// What a canonical payload says beyond its identity: the form entries are
// compared in, the groups and meters a flow uses, whether it drops, and
// whether it is desired state.

package entry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

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
