package ofproxy

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// OpenFlow 1.0 numbers its messages differently from 1.1 and later
// (which ofconn.TypeName names) from type 15 on.
var of10Names = map[uint8]string{
	15: "PORT_MOD", 16: "STATS_REQUEST", 17: "STATS_REPLY", 18: "BARRIER_REQUEST", 19: "BARRIER_REPLY",
	20: "QUEUE_GET_CONFIG_REQUEST", 21: "QUEUE_GET_CONFIG_REPLY",
}

// Nicira extension messages (experimenter 0x2320) controllers use.
var nxtNames = map[uint32]string{
	openflow15.Type_SetFlowFormat:     "NXT_SET_FLOW_FORMAT",
	openflow15.Type_FlowModTableId:    "NXT_FLOW_MOD_TABLE_ID",
	openflow15.Type_SetPacketInFormat: "NXT_SET_PACKET_IN_FORMAT",
	openflow15.Type_SetControllerId:   "NXT_SET_CONTROLLER_ID",
	openflow15.Type_TlvTableMod:       "NXT_TLV_TABLE_MOD",
	openflow15.Type_TlvTableRequest:   "NXT_TLV_TABLE_REQUEST",
	openflow15.Type_TlvTableReply:     "NXT_TLV_TABLE_REPLY",
	openflow15.Type_Resume:            "NXT_RESUME",
	openflow15.Type_CtFlushZone:       "NXT_CT_FLUSH_ZONE",
	openflow15.Type_PacketIn2:         "NXT_PACKET_IN2",
}

const (
	typeExperimenter = 4
	of10Version      = 1
	// nxtSlots bounds the Nicira subtypes counted one by one; higher
	// ones share the last slot.
	nxtSlots = 64
)

// msgKey is where a message is counted: its type in its version's
// numbering, or its Nicira subtype.
type msgKey struct {
	of10 bool
	typ  uint8
	nxt  int // -1 unless a Nicira extension message
}

func keyOf(m []byte) msgKey {
	k := msgKey{of10: m[0] == of10Version, typ: m[1], nxt: -1}
	if m[1] == typeExperimenter && len(m) >= 16 && binary.BigEndian.Uint32(m[8:12]) == openflow15.NxExperimenterID {
		k.nxt = int(min(binary.BigEndian.Uint32(m[12:16]), nxtSlots-1))
	}
	return k
}

// name is the message kind as operators read it, e.g. FLOW_MOD,
// NXT_PACKET_IN2.
func (k msgKey) name() string {
	switch {
	case k.nxt >= 0:
		if n, ok := nxtNames[uint32(k.nxt)]; ok {
			return n
		}
		if k.nxt == nxtSlots-1 {
			return fmt.Sprintf("NXT_%d_OR_ABOVE", k.nxt)
		}
		return fmt.Sprintf("NXT_%d", k.nxt)
	case k.of10:
		if n, ok := of10Names[k.typ]; ok {
			return n
		}
	}
	return ofconn.TypeName(k.typ)
}

// typeCounts counts messages by kind without a lock: the pumps of every
// session add to it on each message.
type typeCounts struct {
	std  [2][256]atomic.Uint64 // [of10][type]
	nxtc [nxtSlots]atomic.Uint64
}

func (c *typeCounts) add(k msgKey) {
	if k.nxt >= 0 {
		c.nxtc[k.nxt].Add(1)
		return
	}
	i := 0
	if k.of10 {
		i = 1
	}
	c.std[i][k.typ].Add(1)
}

// snapshot returns the non-zero counts by name; OpenFlow 1.0 and later
// versions' messages of the same kind add up.
func (c *typeCounts) snapshot() map[string]uint64 {
	out := make(map[string]uint64)
	for i := range c.std {
		for t := range c.std[i] {
			if n := c.std[i][t].Load(); n > 0 {
				out[msgKey{of10: i == 1, typ: uint8(t), nxt: -1}.name()] += n
			}
		}
	}
	for s := range c.nxtc {
		if n := c.nxtc[s].Load(); n > 0 {
			out[msgKey{typ: typeExperimenter, nxt: s}.name()] += n
		}
	}
	return out
}
