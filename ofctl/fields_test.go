package ofctl

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

// prereqPrefix is match text that satisfies p.
var prereqPrefix = map[prereq]string{
	preNone: "", preARP: "arp,", preIPv4: "ip,", preIPv6: "ipv6,", preIPAny: "ip,",
	preTCP: "tcp,", preUDP: "udp,", preSCTP: "sctp,", preL4: "udp,", preICMPv4: "icmp,",
	preICMPv6: "icmp6,", preICMPAny: "icmp6,", preND: "icmp6,icmp_type=136,icmp_code=0,",
	preNDSolicit: "icmp6,icmp_type=135,icmp_code=0,", preNDAdvert: "icmp6,icmp_type=136,icmp_code=0,",
	preVLAN: "vlan_tci=0x1000/0x1000,", preMPLS: "mpls,",
	preCt: "ct_state=+est+trk,", preCtIPv4: "ct_state=+est+trk,ip,", preCtIPv6: "ct_state=-inv+trk,ipv6,",
	preCtL4: "ct_state=+rpl+trk,ct_nw_proto=17,", preNSH: "dl_type=0x894f,nsh_mdtype=1,",
}

// sampleValues returns an exact and (for maskable fields) a masked value of
// f's kind.
func sampleValues(f *field) []string {
	var vs []string
	switch f.kind {
	case kEth:
		vs = []string{"00:11:22:33:44:55", "00:11:22:00:00:00/ff:ff:ff:00:00:00"}
	case kIPv4:
		vs = []string{"10.1.2.3", "10.1.0.0/16", "10.0.0.1/255.0.0.255"}
	case kIPv6:
		vs = []string{"2001:db8::1", "2001:db8::/32"}
	case kPort:
		vs = []string{"7", "LOCAL"}
	case kCtState:
		vs = []string{"+est+trk", "-new+trk", "trk|est"}
	case kTCPFlags:
		vs = []string{"+syn-ack", "0x12/0x12"}
	case kTunFlags:
		vs = []string{"+oam", "-oam"}
	case kFrag:
		vs = []string{"later", "no", "yes", "first", "not_later"}
	case kPacketType:
		vs = []string{"(1,0x894f),nsh_spi=0x10", "(1,0x800),nw_src=1.2.3.4", "(0,0),dl_type=0x800", "(0x2,0x6)"}
	default:
		switch {
		case f.name == "vlan_vid":
			vs = []string{"4101", "0x1000/0x1000"}
		case f.name == "nw_tos":
			vs = []string{"32"}
		case f.bits == 1:
			vs = []string{"1", "0x1/0x1"}
		case f.bits <= 8:
			vs = []string{"3", "0x2/0x3"}
		default:
			vs = []string{"5", "0x4/0x6"}
		}
	}
	if !f.maskable {
		var exact []string
		for _, v := range vs {
			if !strings.Contains(v, "/") {
				exact = append(exact, v)
			}
		}
		vs = exact
	}
	return vs
}

// TestEveryFieldMatchesOVS matches on, sets and moves every field of the
// table with sample values and compares our bytes with ovs-ofctl's, so
// fields the corpora miss are covered too.
func TestEveryFieldMatchesOVS(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 50*time.Second)
	var lines []string
	for _, f := range fields {
		if fieldByName[f.name] != f {
			continue // not a match field name (in_port_oxm)
		}
		pre := prereqPrefix[f.pre]
		for _, v := range sampleValues(f) {
			lines = append(lines, pre+f.name+"="+v+",actions=drop")
		}
		if f.writable && f.kind != kPort {
			v := sampleValues(f)[0]
			switch {
			case f.name == "ct_mark" || f.name == "ct_label":
				lines = append(lines, "ip,actions=ct(commit,exec(set_field:"+v+"->"+f.name+"))")
			case f.name == "vlan_vid" || f.name == "vlan_pcp":
				lines = append(lines, "vlan_tci=0x1000/0x1000,actions=set_field:"+v+"->"+f.name)
			case strings.HasPrefix(f.name, "dl_vlan"):
				// ovs-ofctl has no set_field for these OpenFlow 1.0 names.
			default:
				lines = append(lines, pre+"actions=set_field:"+v+"->"+f.name)
			}
			if f.nxm != "" && f.bits >= 8 && f.name != "ct_mark" && f.name != "ct_label" && f.name != "vlan_vid" {
				lines = append(lines, pre+"actions=move:NXM_NX_REG3[0..7]->"+f.nxm+"[0..7],load:0x1->"+f.nxm+"[1]")
			}
		}
		// Reading the field in the Nicira actions that name it by header.
		if f.nxm != "" && f.bits >= 16 && fieldByName[f.name] == f && f.name != "ct_mark" && f.name != "ct_label" {
			lines = append(lines, pre+"actions=push:"+f.nxm+"[0..15],output:"+f.nxm+"[0..15]")
			if f.writable {
				lines = append(lines, pre+"actions=pop:"+f.nxm+"[0..15]")
			}
			// These take 32-bit headers, which experimenter fields lack
			// (docs/api.md).
			plain := !f.hdr.isExperimenter() && !f.nxmHdr.isExperimenter()
			if plain && f.writable {
				lines = append(lines, pre+"actions=check_pkt_larger(100)->"+f.nxm+"[1],multipath(eth_src,0,hrw,2,0,"+f.nxm+"[2..3])")
			}
			if plain && !strings.Contains(pre, "ip") {
				lines = append(lines, "ip,"+pre+"actions=ct(zone="+f.nxm+"[0..15])")
			}
		}
	}
	for _, line := range lines {
		t.Run(line, func(t *testing.T) {
			fm, perr := ParseFlow(line)
			_, want, oerr := ofctlParse(ctx, line)
			var oe *ofctlError
			switch {
			case perr != nil && oerr != nil:
				return
			case perr != nil && strings.Contains(perr.Error(), "OVS would"):
				// A documented refusal (docs/api.md): OVS would change
				// the flow, and the error says how.
				t.Logf("refused as documented: %v", perr)
				return
			case perr != nil:
				t.Fatalf("ParseFlow rejects what ovs-ofctl accepts: %v", perr)
			case errors.As(oerr, &oe):
				t.Fatalf("ParseFlow accepts what ovs-ofctl rejects: %v", oerr)
			case oerr != nil:
				t.Fatal(oerr)
			}
			got, err := fm.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(withoutXid(got), withoutXid(want)) {
				t.Errorf("bytes differ\n got %s\nwant %s", hex.EncodeToString(got), hex.EncodeToString(want))
			}
			text, err := FormatFlow(fm)
			if err != nil {
				t.Fatalf("FormatFlow: %v", err)
			}
			again, err := ParseFlow(text)
			if err != nil {
				t.Fatalf("ParseFlow(%q): %v", text, err)
			}
			if b2, _ := again.MarshalBinary(); !bytes.Equal(b2, got) {
				t.Errorf("round trip through %q changed the bytes", text)
			}
		})
	}
}
