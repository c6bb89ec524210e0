package ofctl

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// TestCheckMatchOrder: fields are checked in the order sent, against the
// fields before them, with vswitchd's prerequisites (meta-flow.h).
func TestCheckMatchOrder(t *testing.T) {
	const (
		ethIP    = "80000a020800"      // eth_type=0x0800
		ethARP   = "80000a020806"      // eth_type=0x0806
		protoTCP = "80001401" + "06"   // ip_proto=6
		tcpDst80 = "80001c02" + "0050" // tcp_dst=80
		nwDst    = "80001804" + "0a000001"
		vid      = "80000c02" + "1064" // vlan_vid=100 with OFPVID_PRESENT
		vidNone  = "80000c02" + "0000" // no VLAN header
		pcp      = "80000e01" + "03"
		ctState  = "0001d204" + "00000022" // ct_state=+est+trk (NXM_NX_CT_STATE, 4 bytes)
		ctNwSrc  = "0001f004" + "0a000001" // ct_nw_src
		reg0     = "00010004" + "00000001"
		unknown  = "0001fe04" + "00000000" // NXM1 field 127: not one ofctl decodes
	)
	for _, c := range []struct {
		name, oxms string
		bad        bool
	}{
		{"empty", "", false},
		{"in OVS's order", ethIP + protoTCP + tcpDst80, false},
		{"prerequisite after the field", nwDst + ethIP, true},
		{"tcp_dst alone", tcpDst80, true},
		{"tcp_dst before ip_proto", ethIP + tcpDst80 + protoTCP, true},
		{"tcp_dst of ARP", ethARP + protoTCP + tcpDst80, true},
		{"vlan_pcp after vlan_vid", vid + pcp, false},
		{"vlan_pcp without a VLAN header", vidNone + pcp, true},
		{"vlan_pcp alone", pcp, true},
		{"ct_nw_src of a valid connection", ctState + ctNwSrc, false},
		{"ct_nw_src without one", ctNwSrc, true},
		{"registers need nothing", reg0 + ethIP + nwDst, false},
		{"an unknown field stops the check", unknown + tcpDst80, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := hex.DecodeString(c.oxms)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckMatchOrder(b)
			if c.bad != (err != nil) || err != nil && !errors.Is(err, ErrBadPrereq) {
				t.Fatalf("CheckMatchOrder(%s) = %v, want refused %v", c.oxms, err, c.bad)
			}
			if err != nil && !strings.Contains(err.Error(), "before it") {
				t.Errorf("error %q does not say what is missing", err)
			}
		})
	}
}
