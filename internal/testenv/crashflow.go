package testenv

import (
	"encoding/binary"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// CrashingLearn is a canonical flow of module, priority 50 in table 0,
// matching in_port=port, whose
// learn() has 2,000 specs: 28 KB on the wire, but ovs-vswitchd 3.1 aborts
// decoding it (`assertion len > 0 && len <= UINT16_MAX failed in
// ofpact_finish()`, the decoded action is past 64 KB). Built byte by byte:
// it is what a store holds however it got there, whatever the parser
// refuses.
func CrashingLearn(t testing.TB, port uint32, module string) entry.Entry {
	t.Helper()
	const specs = 2000
	learn := make([]byte, 32, 32+14*specs)
	binary.BigEndian.PutUint16(learn[0:], 0xffff) // experimenter action
	binary.BigEndian.PutUint32(learn[4:], 0x2320) // Nicira
	binary.BigEndian.PutUint16(learn[8:], 16)     // NXAST_LEARN
	binary.BigEndian.PutUint16(learn[14:], 100)   // priority of the learned flow
	learn[26] = 10                                // table_id
	for range specs {
		// match NXM_OF_VLAN_TCI[0..11] = NXM_OF_VLAN_TCI[0..11]
		learn = binary.BigEndian.AppendUint16(learn, 12)
		learn = binary.BigEndian.AppendUint32(learn, 0x00000802)
		learn = binary.BigEndian.AppendUint16(learn, 0)
		learn = binary.BigEndian.AppendUint32(learn, 0x00000802)
		learn = binary.BigEndian.AppendUint16(learn, 0)
	}
	for len(learn)%8 != 0 {
		learn = append(learn, 0)
	}
	binary.BigEndian.PutUint16(learn[2:], uint16(len(learn)))

	fm := make([]byte, 48)
	fm[0], fm[1] = 6, 14                            // OpenFlow 1.5 FLOW_MOD
	binary.BigEndian.PutUint16(fm[30:], 50)         // priority
	binary.BigEndian.PutUint32(fm[32:], 0xffffffff) // buffer_id
	binary.BigEndian.PutUint32(fm[36:], 0xffffffff) // out_port
	binary.BigEndian.PutUint32(fm[40:], 0xffffffff) // out_group
	match := []byte{0, 1, 0, 12, 0x80, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(match[8:], port)
	fm = append(fm, match...)
	noActions := append([]byte(nil), fm...)
	fm = append(fm, 0, 4, 0, 0, 0, 0, 0, 0) // APPLY_ACTIONS
	binary.BigEndian.PutUint16(fm[len(fm)-6:], uint16(8+len(learn)))
	fm = append(fm, learn...)
	binary.BigEndian.PutUint16(fm[2:], uint16(len(fm)))
	binary.BigEndian.PutUint16(noActions[2:], uint16(len(noActions)))

	_, id, err := entry.Identify(entry.KindFlow, noActions)
	if err != nil {
		t.Fatal(err)
	}
	// The canonical form when the parser takes it, as sent otherwise.
	payload, _, err := entry.Identify(entry.KindFlow, fm)
	if err != nil {
		payload = fm
	}
	return entry.Entry{Kind: entry.KindFlow, ID: id, Payload: payload, Module: module}
}
