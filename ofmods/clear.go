package ofmods

import (
	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
)

// OpenFlow 1.5 wildcards of a clear.
const (
	tableAll = 0xff
	portAny  = 0xffffffff
	groupAny = 0xffffffff
	groupAll = 0xfffffffc
	meterAll = 0xffffffff
	emptyOXM = 4 // an OXM match header with no fields
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
	switch m[1] {
	case openflow15.Type_FlowMod:
		if len(m) < flowModMin || entry.FlowModCommand(m) != flowDelete || entry.FlowModTable(m) != tableAll {
			return 0, false
		}
		port, group := entry.FlowModOut(m)
		if _, mlen := entry.FlowModMatchHeader(m); entry.FlowModCookieMask(m) != 0 || port != portAny || group != groupAny || mlen != emptyOXM {
			return 0, false
		}
		return entry.KindFlow, true
	case openflow15.Type_GroupMod:
		if entry.ModCommand(m) == groupDelete && modID(entry.KindGroup, m) == groupAll {
			return entry.KindGroup, true
		}
	case openflow15.Type_MeterMod:
		if entry.ModCommand(m) == meterDelete && modID(entry.KindMeter, m) == meterAll {
			return entry.KindMeter, true
		}
	}
	return 0, false
}

// modID is the id a GROUP_MOD or METER_MOD of at least modMin bytes names.
func modID(kind entry.Kind, m []byte) uint32 {
	r, _ := entry.ModRef(kind, m)
	return r.ID
}
