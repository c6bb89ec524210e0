package sandbox

import (
	"slices"
	"strings"
	"testing"
)

func TestPacketFlow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       Packet
		want    string
		wantErr string
	}{
		{
			name: "defaults",
			want: "eth(src=50:54:00:00:00:01,dst=50:54:00:00:00:02),eth_type(0x0800)," +
				"ipv4(src=10.0.0.1,dst=10.0.0.2,proto=6,tos=0,ttl=64,frag=no),tcp(src=40000,dst=80),tcp_flags(syn)",
		},
		{
			name: "all set",
			p:    Packet{SrcMAC: "0A:00:00:00:00:AA", DstMAC: "0a:00:00:00:00:bb", SrcIP: "1.2.3.4", DstIP: "5.6.7.8", SrcPort: 1, DstPort: 65535},
			want: "eth(src=0a:00:00:00:00:aa,dst=0a:00:00:00:00:bb),eth_type(0x0800)," +
				"ipv4(src=1.2.3.4,dst=5.6.7.8,proto=6,tos=0,ttl=64,frag=no),tcp(src=1,dst=65535),tcp_flags(syn)",
		},
		{
			name: "ipv6 destination only",
			p:    Packet{DstIP: "fd00::99"},
			want: "eth(src=50:54:00:00:00:01,dst=50:54:00:00:00:02),eth_type(0x86dd)," +
				"ipv6(src=fd00::1,dst=fd00::99,label=0,proto=6,tclass=0,hlimit=64,frag=no),tcp(src=40000,dst=80),tcp_flags(syn)",
		},
		{
			name: "v4-mapped is ipv4",
			p:    Packet{SrcIP: "::ffff:10.1.1.1", DstIP: "10.1.1.2"},
			want: "eth(src=50:54:00:00:00:01,dst=50:54:00:00:00:02),eth_type(0x0800)," +
				"ipv4(src=10.1.1.1,dst=10.1.1.2,proto=6,tos=0,ttl=64,frag=no),tcp(src=40000,dst=80),tcp_flags(syn)",
		},
		{name: "bad mac", p: Packet{SrcMAC: "nope"}, wantErr: "packet MAC"},
		{name: "long mac", p: Packet{DstMAC: "00:00:00:00:fe:80:00:00"}, wantErr: "not an Ethernet address"},
		{name: "bad ip", p: Packet{SrcIP: "10.0.0.300"}, wantErr: "source IP"},
		{name: "mixed families", p: Packet{SrcIP: "10.0.0.1", DstIP: "fd00::2"}, wantErr: "mixes address families"},
		{name: "zone", p: Packet{SrcIP: "fe80::1%eth0", DstIP: "fe80::2"}, wantErr: "zone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.p.flow()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("flow() = %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("flow() = %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
}

const dumpPortsOut = `OFPST_PORT reply (OF1.5) (xid=0x4): 1 ports
  port  2: rx pkts=3, bytes=0, drop=?, errs=?, frame=?, over=?, crc=?
           tx pkts=41, bytes=236, drop=?, errs=?, coll=?
           duration=77.527s
           CUSTOM Statistics
                      rx_custom_packets_1=0, rx_custom_packets_2=0, rx_q0_bytes=0,
                      rx_q0_packets=0, tx_q0_bytes=236, tx_q0_packets=4,
`

func TestParsePortStats(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		rx, tx  uint64
		wantErr bool
	}{
		{name: "ovs 3.1", in: dumpPortsOut, rx: 3, tx: 41},
		{name: "unreported", in: "port  1: rx pkts=?, bytes=?\n tx pkts=?, bytes=?", wantErr: true},
		{name: "no tx", in: "port  1: rx pkts=1, bytes=54", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "overflow", in: "rx pkts=18446744073709551616 tx pkts=1", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rx, tx, err := parsePortStats(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parsePortStats = %d, %d, nil; want an error", rx, tx)
				}
				return
			}
			if err != nil || rx != tc.rx || tx != tc.tx {
				t.Fatalf("parsePortStats = %d, %d, %v; want %d, %d", rx, tx, err, tc.rx, tc.tx)
			}
		})
	}
}

func TestNormalizeDump(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{
			name: "no-stats flows",
			in:   " priority=0 actions=NORMAL\n in_port=1 actions=output:2\n",
			want: []string{"in_port=1 actions=output:2", "priority=0 actions=NORMAL"},
		},
		{
			name: "groups with header",
			in:   "OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):\n group_id=2,type=all\n group_id=1,type=all\n",
			want: []string{"group_id=1,type=all", "group_id=2,type=all"},
		},
		{
			name: "a flow mentioning reply is kept",
			in:   " table=1, reply=1 actions=drop:\n",
			want: []string{"table=1, reply=1 actions=drop:"},
		},
		{name: "empty", in: "\n\n", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := normalizeDump(tc.in); !slices.Equal(got, tc.want) {
				t.Fatalf("normalizeDump = %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzParsePortStats(f *testing.F) {
	f.Add(dumpPortsOut)
	f.Add("rx pkts=?, tx pkts=1")
	f.Add("rx pkts=99999999999999999999 tx pkts=0")
	f.Fuzz(func(t *testing.T, in string) {
		rx, tx, err := parsePortStats(in)
		if err != nil && (rx != 0 || tx != 0) {
			t.Fatalf("error %v with non-zero counters %d, %d", err, rx, tx)
		}
	})
}

func FuzzNormalizeDump(f *testing.F) {
	f.Add(" priority=0 actions=NORMAL\n")
	f.Add("OFPST_FLOW reply (OF1.5) (xid=0x2):\n cookie=0x1, table=3, priority=5,ip actions=drop\n\n")
	f.Add("meter=1 kbps bands=\ntype=drop rate=100\n")
	f.Fuzz(func(t *testing.T, in string) {
		got := normalizeDump(in)
		if !slices.IsSorted(got) {
			t.Fatalf("not sorted: %q", got)
		}
		for _, l := range got {
			if l == "" || l != strings.TrimSpace(l) || strings.Contains(l, "\n") {
				t.Fatalf("untrimmed or empty line %q", l)
			}
		}
	})
}

func FuzzPacketFlow(f *testing.F) {
	f.Add("", "", "", "", uint16(0), uint16(0))
	f.Add("0a:00:00:00:00:01", "ff:ff:ff:ff:ff:ff", "fd00::1", "fd00::2", uint16(1), uint16(2))
	f.Add("x", "y", "1.1.1.1", "::1", uint16(0), uint16(9))
	f.Fuzz(func(t *testing.T, srcMAC, dstMAC, srcIP, dstIP string, sp, dp uint16) {
		flow, err := Packet{srcMAC, dstMAC, srcIP, dstIP, sp, dp}.flow()
		if err != nil {
			return
		}
		// Whatever reaches ovs-appctl must be one well-formed SYN argument.
		if !strings.HasSuffix(flow, ",tcp_flags(syn)") || strings.ContainsAny(flow, " \n%") ||
			strings.Count(flow, "(") != strings.Count(flow, ")") {
			t.Fatalf("malformed flow %q", flow)
		}
	})
}
