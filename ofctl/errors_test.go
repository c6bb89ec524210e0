package ofctl

import (
	"errors"
	"strings"
	"testing"
	"time"

	"antrea.io/libOpenflow/openflow15"
)

// errorCases are lines ParseFlow must reject, with the token and column it
// must point at. ovsRejects says whether ovs-ofctl rejects the line too;
// where it does not, ovs-ofctl silently drops part of the flow and flowstate
// is stricter on purpose.
var errorCases = []struct {
	name, line string
	col        int
	token, msg string
	ovsRejects bool
}{
	{"unknown field", "nw_srcc=1.2.3.4,actions=drop", 1, "nw_srcc", "unknown field", true},
	{"bad address", "ip,nw_src=1.2.3.400,actions=drop", 11, "1.2.3.400", "bad IPv4 address", false},
	{"bad prefix", "ip,nw_src=1.2.3.4/33,actions=drop", 11, "1.2.3.4/33", "bad prefix length", true},
	{"mask on unmaskable field", "eth_type=0x800/0xff00,actions=drop", 10, "0x800/0xff00", "does not support masking", true},
	{"missing prerequisite", "tp_dst=80,actions=drop", 1, "tp_dst=80", "missing prerequisite: tp_dst requires tcp, udp or sctp", false},
	{"missing ip prerequisite", "nw_src=10.0.0.1,actions=drop", 1, "nw_src=10.0.0.1", "requires ip", false},
	{"priority out of range", "priority=70000,actions=drop", 10, "70000", "invalid priority", true},
	{"register out of range", "reg0=0x1ffffffff,actions=drop", 6, "0x1ffffffff", "out of range", true},
	{"table 255", "table=255,actions=drop", 7, "255", "bad table id", false},
	{"cookie mask", "cookie=1/1,actions=drop", 8, "1/1", "cannot use a cookie mask", true},
	{"no actions", "ip", 3, "", "must specify an action", true},
	{"unknown action", "ip,actions=foo", 12, "foo", "unknown action", true},
	{"bad port", "in_port=foo,actions=drop", 9, "foo", "invalid or unknown port", true},
	{"unknown ct_state flag", "ct_state=+foo,ip,actions=drop", 10, "+foo", "unknown flag", true},
	{"drop with others", "actions=drop,output:1", 9, "drop", "must not be accompanied", true},
	{"instruction order", "actions=goto_table:1,output:1", 22, "output:1", "invalid instruction ordering", true},
	{"goto earlier table", "table=3,actions=goto_table:1", 28, "1", "later table", true},
	{"ct without ip", "actions=ct(commit)", 9, "ct(commit)", "requires ip or ipv6", true},
	{"ct exec without commit", "ip,actions=ct(exec(set_field:1->ct_mark))", 12, "ct(exec(set_field:1->ct_mark))", "requires \"commit\"", false},
	{"ct_mark outside ct", "actions=set_field:1->ct_mark", 22, "ct_mark", "only be set inside ct", true},
	{"exec sets a register", "ip,actions=ct(commit,exec(set_field:1->reg0))", 40, "reg0", "only ct_mark and ct_label", true},
	{"load too wide", "actions=load:0x1ff->NXM_NX_REG0[0..7]", 14, "0x1ff", "out of range", true},
	{"move widths differ", "actions=move:NXM_NX_REG0[0..3]->NXM_NX_REG1[0..4]", 14, "NXM_NX_REG0[0..3]->NXM_NX_REG1[0..4]", "bits wide", true},
	{"pop_vlan without vlan", "actions=pop_vlan", 9, "pop_vlan", "requires a VLAN header", true},
	{"output to reserved port", "actions=output:65280", 16, "65280", "bad output port", true},
	{"unbalanced parenthesis", "ip,actions=resubmit(", 12, "resubmit(", "missing ')'", true},
	{"set_field value outside mask", "actions=set_field:0xff/0xf->reg1", 19, "0xff/0xf", "outside the mask", false},
	{"one-clause conjunction", "actions=conjunction(1,1/1)", 9, "conjunction(1,1/1)", "between 2 and 64 clauses", true},
	{"unknown learn keyword", "actions=learn(importance=3)", 15, "importance=3", "unknown keyword", true},
	{"learned field without prerequisite", "ip,actions=learn(NXM_OF_IP_SRC[])", 18, "NXM_OF_IP_SRC[]", "earlier in the learn specification", true},
	{"nat outside ct", "ip,actions=nat", 12, "nat", "only allowed inside ct", true},
	{"bad nat range", "ip,actions=ct(commit,nat(src=10.0.0.9-10.0.0.1))", 30, "10.0.0.9-10.0.0.1", "invalid nat range", true},
	{"dec_ttl without ip", "actions=dec_ttl", 9, "dec_ttl", "requires ip or ipv6", true},
	{"set_field without prerequisite", "actions=set_field:1.1.1.1->ip_src", 28, "ip_src", "requires ip", true},
	{"vlan_vid without vlan", "actions=set_field:4196->vlan_vid", 25, "vlan_vid", "requires a VLAN header", true},
	{"value needed", "ip,nw_src,actions=drop", 4, "nw_src", "needs a value", true},
	{"dl_vlan beyond 12 bits", "dl_vlan=8191,actions=drop", 9, "8191", "OVS would match dl_vlan=4095", false},
	{"ct_tp_src without ct_nw_proto", "ct_state=+trk+est,ct_tp_src=80,actions=drop", 19, "ct_tp_src=80", "OVS would leave ct_tp_src out of the match", false},
	{"enqueue without a queue", "actions=enqueue:1", 9, "enqueue:1", `"enqueue" syntax is "enqueue:PORT:QUEUE"`, true},
	{"enqueue to a reserved port", "actions=enqueue:CONTROLLER:1", 17, "CONTROLLER", "bad enqueue port", true},
	{"sample without probability", "actions=sample(collector_set_id=1)", 9, "sample(collector_set_id=1)", "probability", true},
	{"check_pkt_larger wide destination", "actions=check_pkt_larger(100)->reg0[0..1]", 32, "reg0[0..1]", "1-bit destination", true},
	{"set_vlan_vid without vlan", "actions=set_vlan_vid:5", 9, "set_vlan_vid:5", "mod_vlan_vid pushes one", true},
	{"multipath links beyond destination", "actions=multipath(eth_src,0,hrw,5,0,reg0[0..1])", 37, "reg0[0..1]", "less than specified n_links", true},
	{"fin_timeout without tcp", "actions=fin_timeout(idle_timeout=1)", 9, "fin_timeout(idle_timeout=1)", "requires tcp", true},
	{"mpls_label without mpls", "mpls_label=5,actions=drop", 1, "mpls_label=5", "requires mpls or mplsm", false},
	{"mpls_tc beyond 3 bits", "mpls,mpls_tc=9,actions=drop", 14, "9", "OVS would match mpls_tc=1", false},
	{"push_mpls of a non-MPLS type", "actions=push_mpls:0x800", 19, "0x800", "not a valid MPLS ethertype", false},
	{"pop_mpls without mpls", "ip,actions=pop_mpls:0x800", 12, "pop_mpls:0x800", "requires an MPLS packet", true},
	{"set_mpls_ttl without mpls", "actions=set_mpls_ttl:3", 9, "set_mpls_ttl:3", "requires an MPLS packet", true},
	{"nsh field without nsh", "nsh_spi=0x10,actions=drop", 1, "nsh_spi=0x10", "requires NSH", false},
	{"nsh context without md type 1", "dl_type=0x894f,nsh_c1=1,actions=drop", 16, "nsh_c1=1", "needs nsh_mdtype=1: OVS would match it but leave it out", false},
	{"dec_nsh_ttl without nsh", "ip,actions=dec_nsh_ttl", 12, "dec_nsh_ttl", "requires an NSH packet", true},
	{"encap of an unknown header", "actions=encap(vxlan)", 15, "vxlan", "encap header not supported", true},
	{"nsh tlv with a leading zero byte", "ip,actions=encap(nsh(md_type=2,tlv(0x1,2,0x0012)))", 42, "0x0012", "OVS prints it without the leading zeros", false},
	{"default packet_type alone", "packet_type=(0,0),in_port=1,actions=drop", 1, "packet_type=(0,0)", "OVS would match it but print the flow without it", false},
	{"packet_type and eth_type", "packet_type=(1,0x800),ip,actions=drop", 1, "packet_type=(1,0x800)", "already gives the Ethernet type", false},
	{"bundle with an unknown algorithm", "actions=bundle(eth_src,0,iter_hash,ofport,members:1)", 26, "iter_hash", "unknown algorithm", true},
	{"bundle_load of a read-only field", "actions=bundle_load(eth_src,0,hrw,ofport,NXM_OF_ETH_TYPE[],members:1)", 42, "NXM_OF_ETH_TYPE[]", "not writable", true},
	{"masked erspan version", "tun_erspan_ver=2/0x3,actions=drop", 16, "2/0x3", "OVS would use the value as the mask", false},
	{"erspan direction 0", "tun_erspan_ver=2,tun_erspan_dir=0,actions=drop", 18, "tun_erspan_dir=0", "OVS uses the value as the mask, so it would leave tun_erspan_dir out", false},
	{"erspan index without version 1", "tun_erspan_idx=0x7,actions=drop", 1, "tun_erspan_idx=0x7", "OVS would match it but leave it out", false},
	{"masked erspan index", "tun_erspan_ver=1,tun_erspan_idx=0x7/0xf,actions=drop", 18, "tun_erspan_idx=0x7/0xf", "print it without the mask", false},
	{"zero-mask Ethernet field alone", "dl_dst=aa:bb:cc:dd:ee:ff/00:00:00:00:00:00,actions=drop", 1, "dl_dst=aa:bb:cc:dd:ee:ff/00:00:00:00:00:00", "still match only Ethernet packets", false},
	{"tun_metadata mask of all ones", "tun_metadata1=0xef/0xff,actions=drop", 15, "0xef/0xff", "OVS would print the match as tun_metadata1=0xef", false},
	{"tun_metadata value wider than its mask", "tun_metadata0=0x100/0x1,actions=drop", 15, "0x100/0x1", "OVS would print the match as tun_metadata0=0/0x1, which reads back as a 1-byte field", false},
	{"tun_metadata set twice", "tun_metadata1=1,tun_metadata1=2,actions=drop", 17, "tun_metadata1=2", "set multiple times", true},
	{"bits of a field too wide", "tcp,tp_src[0..3]=17,actions=drop", 18, "17", "out of range", true},
	{"delete_field of a plain field", "actions=delete_field:reg0", 22, "reg0", "takes a tun_metadata field", true},
	{"dec_ttl without ids", "ip,actions=dec_ttl(,)", 12, "dec_ttl(,)", "at least one controller id", true},
	// ovs-ofctl takes this, vswitchd refuses it (OFPBAC_MATCH_INCONSISTENT):
	// after encap(ethernet) its flow has no Ethernet type.
	{"nsh field after encap(ethernet) of a packet type", "packet_type=(1,0x894f),actions=encap(ethernet),set_field:1->nsh_spi", 61, "nsh_spi", "requires NSH", false},
	{"note in write_actions", "actions=write_actions(note:01)", 23, "note:01", "vswitchd would refuse the flow (disallowed action in action set)", false},
	{"packet_type in learn", "actions=learn(table=1,packet_type=(1,0x800))", 23, "packet_type=(1,0x800)", "OVS prints it as packet_type=packet_type=", false},
	{"L4 field in a later fragment", "udp,ip_frag=later,udp_src=5,actions=drop", 19, "udp_src=5", "cannot be matched in a later fragment", false},
	{"Ethernet field with a packet type", "packet_type=(1,0x800),dl_src=00:00:00:00:00:01,actions=drop", 23, "dl_src=00:00:00:00:00:01", "needs an Ethernet packet", false},
	{"eth_dst after decap", "ip,actions=decap(),set_field:00:00:00:00:00:01->eth_dst", 49, "eth_dst", "requires an Ethernet packet", true},
	{"mod_vlan_vid after decap", "ip,actions=decap(),mod_vlan_vid:5", 20, "mod_vlan_vid:5", "requires an Ethernet packet", false},
	{"debug action", "actions=debug_recirc", 9, "debug_recirc", "only a vswitchd started with --enable-dummy accepts it", false},
	{"learn of an experimenter field", "dl_type=0x894f,actions=learn(NXOXM_NSH_SI[])", 30, "NXOXM_NSH_SI[]", "only set_field, load, move, push, pop and output", true},
}

func TestParseFlowErrors(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			fm, err := ParseFlow(tc.line)
			if err == nil {
				t.Fatalf("ParseFlow(%q) = %v, want an error", tc.line, fm)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is %T, want *SyntaxError", err, err)
			}
			if se.Line != 0 || se.Col != tc.col || se.Token != tc.token || !strings.Contains(se.Msg, tc.msg) {
				t.Errorf("ParseFlow(%q) = line %d col %d token %q msg %q; want col %d token %q msg containing %q",
					tc.line, se.Line, se.Col, se.Token, se.Msg, tc.col, tc.token, tc.msg)
			}
			if tc.col >= 1 && tc.col <= len(tc.line) && !strings.HasPrefix(tc.line[tc.col-1:], tc.token) {
				t.Errorf("column %d of %q does not start with the token %q", tc.col, tc.line, tc.token)
			}
			if !strings.HasPrefix(se.Error(), "ofctl: column ") {
				t.Errorf("Error() = %q, want it to start with \"ofctl: column \"", se.Error())
			}
		})
	}
}

// TestErrorsAgreeWithOVS checks that ovs-ofctl rejects the same lines,
// except where flowstate is deliberately stricter.
func TestErrorsAgreeWithOVS(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 30*time.Second)
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ofctlParse(ctx, tc.line)
			if tc.ovsRejects && err == nil {
				t.Errorf("ovs-ofctl accepts %q, which ParseFlow rejects", tc.line)
			}
			if !tc.ovsRejects && err != nil {
				t.Logf("ovs-ofctl also rejects %q: %v", tc.line, err)
			}
		})
	}
}

func TestSyntaxErrorText(t *testing.T) {
	e := &SyntaxError{Line: 3, Col: 17, Token: "nw_srcc", Msg: "unknown field"}
	if got, want := e.Error(), `ofctl: line 3, column 17 ("nw_srcc"): unknown field`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestParseFlows(t *testing.T) {
	in := strings.Join([]string{
		"# a comment",
		"",
		"table=0,priority=100,ip,actions=ct(table=1,zone=65520)",
		"   ",
		"table=1,priority=100,ip,nw_srcc=1.2.3.4,actions=drop",
		"  # indented comment",
		"table=1,priority=90,ip,actions=resubmit(,2)",
		"table=1,actions=bogus",
	}, "\n")
	flows, err := ParseFlows(strings.NewReader(in))
	if len(flows) != 2 || flows[0].Line != 3 || flows[1].Line != 7 || flows[1].Text != "table=1,priority=90,ip,actions=resubmit(,2)" {
		t.Errorf("flows = %+v, want lines 3 and 7", flows)
	}
	for _, f := range flows {
		if f.Mod == nil {
			t.Errorf("line %d has no FlowMod", f.Line)
		}
	}
	errs := unjoin(err)
	if len(errs) != 2 {
		t.Fatalf("errors = %v, want 2", err)
	}
	for i, want := range []struct {
		line, col int
		token     string
	}{{5, 25, "nw_srcc"}, {8, 17, "bogus"}} {
		var se *SyntaxError
		if !errors.As(errs[i], &se) || se.Line != want.line || se.Col != want.col || se.Token != want.token {
			t.Errorf("error %d = %v, want line %d column %d token %q", i, errs[i], want.line, want.col, want.token)
		}
	}
	if !strings.Contains(err.Error(), `ofctl: line 5, column 25 ("nw_srcc"): unknown field`) {
		t.Errorf("joined error %q lacks the line 5 error", err)
	}
}

func TestParseMeterAndGroupID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"meter=5", 5, true},
		{"meter=controller", openflow15.M_CONTROLLER, true},
		{"meter=slowpath", openflow15.M_SLOWPATH, true},
		{"meter=1,kbps,band=type=drop,rate=1", 1, true},
		{"meter=0", 0, false},
		{"meter=4294967293", 0, false},
		{"meter=all", 0, false},
		{"kbps", 0, false},
	} {
		got, err := ParseMeterID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMeterID(%q) = %#x, %v", tc.in, got, err)
		}
		if err == nil {
			if cerr := CheckMeterID(got); cerr != nil {
				t.Errorf("CheckMeterID(%#x): %v", got, cerr)
			}
		}
	}
	for _, id := range []uint32{0, openflow15.M_MAX + 1, openflow15.M_ALL} {
		if CheckMeterID(id) == nil {
			t.Errorf("CheckMeterID(%#x) accepted", id)
		}
	}
	if id, err := ParseGroupID("group_id=7,type=all,bucket=output:1"); err != nil || id != 7 {
		t.Errorf("ParseGroupID = %d, %v", id, err)
	}
	if _, err := ParseGroupID("group_id=4294967295"); err == nil {
		t.Error("ParseGroupID accepted OFPG_ANY")
	}
}
