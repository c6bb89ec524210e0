package ofctl

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestFlowFilterOracle: a filter selects the flows `ovs-ofctl dump-flows
// BRIDGE FILTER` selects from the same flows on a real switch.
func TestFlowFilterOracle(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 30*time.Second)
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := sb.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	// Without the bridge's default NORMAL flow: only the flows below.
	if out, err := sb.Ofctl(ctx, "del-flows", "br0"); err != nil {
		t.Fatal(err, out)
	}
	const tlvMap = "{class=0xffff,type=0,len=4}->tun_metadata0"
	if out, err := sb.Ofctl(ctx, "add-tlv-map", "br0", tlvMap); err != nil {
		t.Fatal(err, out)
	}
	tlv, err := ParseTLVMap(tlvMap)
	if err != nil {
		t.Fatal(err)
	}
	flows := []string{
		"table=0,priority=100,ip,actions=ct(table=1,zone=65520)",
		"table=0,priority=90,in_port=1,actions=normal",
		"table=0,priority=80,arp,actions=normal",
		"table=1,priority=100,tcp,tp_dst=80,actions=drop",
		"table=1,priority=90,tcp,actions=resubmit(,2)",
		"table=1,priority=80,ip,nw_dst=10.1.0.0/16,actions=drop",
		"table=1,priority=70,ip,nw_dst=10.0.0.0/8,actions=drop",
		"table=1,priority=60,ip,nw_dst=10.1.2.3,actions=drop",
		"table=2,priority=100,cookie=0x15,reg0=0x5,actions=drop",
		"table=2,priority=90,cookie=0x25,reg0=0x5/0xff,ip,actions=drop",
		"table=2,priority=80,ipv6,actions=drop",
		"table=3,priority=0,actions=drop",
		"table=4,priority=100,mpls,mpls_label=5,actions=drop",
		"table=4,priority=90,packet_type=(1,0x894f),nsh_spi=0x10,actions=drop",
		"table=4,priority=80,tun_metadata0=0x1234,actions=drop",
		"table=4,priority=70,tun_metadata0=0x1200/0xff00,actions=drop",
		"table=4,priority=60,tun_metadata0,actions=drop",
		"table=5,priority=10,ip,actions=output:2",
		"table=5,priority=20,tcp,actions=mod_vlan_vid:5,output:1,output:3",
		"table=5,priority=30,actions=write_actions(output:2)",
		"table=5,priority=40,udp,actions=LOCAL",
	}
	for _, f := range flows {
		if out, err := sb.Ofctl(ctx, "add-flow", "br0", f); err != nil {
			t.Fatal(err, out)
		}
	}
	texts := make([]string, len(flows))
	encoded := make([][]byte, len(flows))
	for i, f := range flows {
		// As the switch holds them: tun_metadata at its option length.
		fm, err := ParseFlowTLV(f, tlv)
		if err != nil {
			t.Fatal(err)
		}
		if encoded[i], err = fm.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
		if texts[i], err = FormatFlow(fm); err != nil {
			t.Fatal(err)
		}
	}
	for _, filter := range []string{
		"", "table=0", "table=1,ip", "ip", "tcp", "tcp,tp_dst=80", "ip,nw_dst=10.0.0.0/8", "ip,nw_dst=10.1.0.0/16",
		"ip,nw_dst=10.1.2.3", "reg0=0x5", "reg0=0x5/0xf", "cookie=0x15/-1", "cookie=0x05/0x0f", "cookie=0x20/0xf0",
		"in_port=1", "dl_type=0x0800", "arp", "ipv6", "table=3",
		"mpls", "mpls,mpls_label=5", "packet_type=(1,0x894f)", "tun_metadata0=0x1234", "tun_metadata0=0x1200/0xff00",
		"tun_metadata0", "table=4,tun_metadata0=0x1034/0xf0ff", "tun_metadata0=0x34/0xf0ff",
		"out_port=2", "out_port=1", "out_port=3", "table=5,ip,out_port=2", "out_port=normal", "out_port=LOCAL", "out_port=none",
	} {
		t.Run(filter, func(t *testing.T) {
			args := []string{"--no-stats", "dump-flows", "br0"}
			if filter != "" {
				args = append(args, filter)
			}
			out, err := sb.Ofctl(ctx, args...)
			if err != nil {
				t.Fatal(err, out)
			}
			var want []string
			for _, l := range strings.Split(out, "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "OFPST_") && !strings.HasPrefix(l, "NXST_") {
					want = append(want, l)
				}
			}
			ff, err := ParseFlowFilter(filter)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, b := range encoded {
				ok, err := ff.Match(b)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					got = append(got, texts[i])
				}
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("selected\n  %s\nwant (ovs-ofctl)\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
	for _, bad := range []string{"tp_dst=80", "nosuch=1", "table=x", "actions=drop", "cookie=0x15", "priority=100"} {
		if _, err := ParseFlowFilter(bad); err == nil {
			t.Errorf("filter %q accepted", bad)
		}
	}
}
