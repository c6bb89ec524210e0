package ofmods

import (
	"encoding/binary"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
)

// OpenFlow 1.5 wildcards of a clear.
const (
	tableAll  = 0xff
	portAny   = 0xffffffff
	groupAny  = 0xffffffff
	groupAll  = 0xfffffffc
	meterAll  = 0xffffffff
	emptyOXM  = 4 // an OXM match header with no fields
	offMask   = 16
	offOutPrt = 36
	offOutGrp = 40
	offMatchL = 50
)

// Clears reports whether m deletes every entry of a kind the controller
// may delete: a FLOW_MOD DELETE of every table with no match, cookie mask,
// out_port or out_group; a GROUP_MOD DELETE of OFPG_ALL; a METER_MOD
// DELETE of OFPM_ALL. A controller sends these to start over (ovn-controller
// after every connect), and what it installs next is all it wants.
func Clears(m []byte) (entry.Kind, bool) {
	if len(m) < modMin {
		return 0, false
	}
	be := binary.BigEndian
	switch m[1] {
	case openflow15.Type_FlowMod:
		if len(m) < flowModMin || m[offCommand] != flowDelete || m[offTable] != tableAll {
			return 0, false
		}
		if be.Uint64(m[offMask:]) != 0 || be.Uint32(m[offOutPrt:]) != portAny || be.Uint32(m[offOutGrp:]) != groupAny ||
			be.Uint16(m[offMatchL:]) != emptyOXM {
			return 0, false
		}
		return entry.KindFlow, true
	case openflow15.Type_GroupMod:
		if be.Uint16(m[offModCmd:]) == groupDelete && be.Uint32(m[offModID:]) == groupAll {
			return entry.KindGroup, true
		}
	case openflow15.Type_MeterMod:
		if be.Uint16(m[offModCmd:]) == meterDelete && be.Uint32(m[offModID:]) == meterAll {
			return entry.KindMeter, true
		}
	}
	return 0, false
}
