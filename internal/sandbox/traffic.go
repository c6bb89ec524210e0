package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Packet describes the TCP SYN InjectSYN sends. Zero fields take defaults:
// MACs 50:54:00:00:00:01 -> :02, IPs 10.0.0.1 -> 10.0.0.2 (fd00::1 ->
// fd00::2 when the other address is IPv6), ports 40000 -> 80.
type Packet struct {
	SrcMAC, DstMAC   string
	SrcIP, DstIP     string
	SrcPort, DstPort uint16
}

// flow renders p in the datapath flow syntax netdev-dummy/receive parses.
// It must be a SYN: a pipeline with ct() would mark anything else invalid.
// in_port is left out: the receiving netdev is named on the command line.
func (p Packet) flow() (string, error) {
	if p.SrcMAC == "" {
		p.SrcMAC = "50:54:00:00:00:01"
	}
	if p.DstMAC == "" {
		p.DstMAC = "50:54:00:00:00:02"
	}
	v6 := strings.Contains(p.SrcIP, ":") || strings.Contains(p.DstIP, ":")
	if p.SrcIP == "" {
		p.SrcIP = map[bool]string{false: "10.0.0.1", true: "fd00::1"}[v6]
	}
	if p.DstIP == "" {
		p.DstIP = map[bool]string{false: "10.0.0.2", true: "fd00::2"}[v6]
	}
	if p.SrcPort == 0 {
		p.SrcPort = 40000
	}
	if p.DstPort == 0 {
		p.DstPort = 80
	}
	srcMAC, err := parseMAC(p.SrcMAC)
	if err != nil {
		return "", err
	}
	dstMAC, err := parseMAC(p.DstMAC)
	if err != nil {
		return "", err
	}
	src, err := netip.ParseAddr(p.SrcIP)
	if err != nil {
		return "", fmt.Errorf("sandbox: packet source IP: %w", err)
	}
	dst, err := netip.ParseAddr(p.DstIP)
	if err != nil {
		return "", fmt.Errorf("sandbox: packet destination IP: %w", err)
	}
	src, dst = src.Unmap(), dst.Unmap()
	if src.Is4() != dst.Is4() {
		return "", fmt.Errorf("sandbox: packet mixes address families (%s -> %s)", src, dst)
	}
	if src.Zone() != "" || dst.Zone() != "" {
		return "", fmt.Errorf("sandbox: packet addresses must not have a zone (%s -> %s)", src, dst)
	}
	l3 := fmt.Sprintf("eth_type(0x0800),ipv4(src=%s,dst=%s,proto=6,tos=0,ttl=64,frag=no)", src, dst)
	if src.Is6() {
		l3 = fmt.Sprintf("eth_type(0x86dd),ipv6(src=%s,dst=%s,label=0,proto=6,tclass=0,hlimit=64,frag=no)", src, dst)
	}
	return fmt.Sprintf("eth(src=%s,dst=%s),%s,tcp(src=%d,dst=%d),tcp_flags(syn)",
		srcMAC, dstMAC, l3, p.SrcPort, p.DstPort), nil
}

func parseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil {
		return nil, fmt.Errorf("sandbox: packet MAC: %w", err)
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("sandbox: packet MAC %q: not an Ethernet address", s)
	}
	return mac, nil
}

// InjectSYN makes port of bridge receive the TCP SYN p, through
// `ovs-appctl netdev-dummy/receive`. vswitchd processes it in the same
// main-loop pass, so counters read afterwards include it; a packet that no
// flow forwards (or that arrives during flow-restore-wait) still counts as
// received on port.
func (s *Sandbox) InjectSYN(ctx context.Context, bridge, port string, p Packet) error {
	flow, err := p.flow()
	if err != nil {
		return err
	}
	return s.receive(ctx, bridge, port, flow)
}

// receive makes port of bridge receive the packet of datapath flow syntax
// flow (netdev-dummy/receive).
func (s *Sandbox) receive(ctx context.Context, bridge, port, flow string) error {
	// netdev-dummy/receive takes an interface name alone; check the bridge
	// so a test that names the wrong one fails loudly.
	out, err := s.Vsctl(ctx, "--no-wait", "iface-to-br", port)
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(out); got != bridge {
		return fmt.Errorf("sandbox: inject on %s: port is on bridge %q, not %q", port, got, bridge)
	}
	_, err = s.Appctl(ctx, "netdev-dummy/receive", port, flow)
	return err
}

// PortStats returns the packets port has received and sent, from
// `ovs-ofctl dump-ports`. The counters restart from zero with vswitchd.
func (s *Sandbox) PortStats(ctx context.Context, bridge, port string) (rx, tx uint64, err error) {
	// Any OpenFlow version: counters must be readable from a bridge whose
	// protocols exclude 1.5 too (a later -O overrides Ofctl's).
	out, err := s.Ofctl(ctx, "-O", "OpenFlow10,OpenFlow11,OpenFlow12,OpenFlow13,OpenFlow14,OpenFlow15", "dump-ports", bridge, port)
	if err != nil {
		return 0, 0, err
	}
	rx, tx, err = parsePortStats(out)
	if err != nil {
		return 0, 0, fmt.Errorf("sandbox: port stats of %s on %s: %w", port, bridge, err)
	}
	return rx, tx, nil
}

var (
	rxPkts = regexp.MustCompile(`\brx pkts=(\d+|\?)`)
	txPkts = regexp.MustCompile(`\btx pkts=(\d+|\?)`)
)

// parsePortStats reads the first port block of `ovs-ofctl dump-ports`:
//
//	port  2: rx pkts=0, bytes=0, drop=?, errs=?, frame=?, over=?, crc=?
//	         tx pkts=1, bytes=54, drop=?, errs=?, coll=?
func parsePortStats(out string) (rx, tx uint64, err error) {
	get := func(re *regexp.Regexp, what string) (uint64, error) {
		m := re.FindStringSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("no %s packet count in %q", what, out)
		}
		if m[1] == "?" {
			return 0, fmt.Errorf("%s packet count not reported", what)
		}
		return strconv.ParseUint(m[1], 10, 64)
	}
	if rx, err = get(rxPkts, "rx"); err != nil {
		return 0, 0, err
	}
	if tx, err = get(txPkts, "tx"); err != nil {
		return 0, 0, err
	}
	return rx, tx, nil
}

// DumpFlows returns bridge's flows as `ovs-ofctl -O OpenFlow15 --no-stats
// --no-names dump-flows` prints them, one per element, without counters,
// sorted: equal slices mean equal flow tables.
func (s *Sandbox) DumpFlows(ctx context.Context, bridge string) ([]string, error) {
	out, err := s.Ofctl(ctx, "--no-stats", "--no-names", "dump-flows", bridge)
	if err != nil {
		return nil, err
	}
	return normalizeDump(out), nil
}

// DumpGroups returns bridge's groups (`ovs-ofctl dump-groups`), sorted.
func (s *Sandbox) DumpGroups(ctx context.Context, bridge string) ([]string, error) {
	out, err := s.Ofctl(ctx, "--no-names", "dump-groups", bridge)
	if err != nil {
		return nil, err
	}
	return normalizeDump(out), nil
}

// DumpMeters returns bridge's meters (`ovs-ofctl dump-meters`), one per
// element, sorted. ovs-ofctl prints a meter's bands on continuation lines;
// they are joined to the meter's line with a space.
func (s *Sandbox) DumpMeters(ctx context.Context, bridge string) ([]string, error) {
	out, err := s.Ofctl(ctx, "dump-meters", bridge)
	if err != nil {
		return nil, err
	}
	var meters []string
	for _, l := range normalizeLines(out) {
		if strings.HasPrefix(l, "meter=") || len(meters) == 0 {
			meters = append(meters, l)
			continue
		}
		meters[len(meters)-1] += " " + l
	}
	slices.Sort(meters)
	return meters, nil
}

// normalizeDump turns ovs-ofctl dump output into sorted entry lines.
func normalizeDump(out string) []string {
	lines := normalizeLines(out)
	slices.Sort(lines)
	return lines
}

// normalizeLines trims lines and drops blank ones and reply headers such as
// "OFPST_FLOW reply (OF1.5) (xid=0x2):".
func normalizeLines(out string) []string {
	var lines []string
	for l := range strings.SplitSeq(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || isReplyHeader(l) {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

func isReplyHeader(l string) bool {
	head, _, ok := strings.Cut(l, " reply")
	return ok && !strings.ContainsAny(head, " =,") && strings.HasSuffix(l, ":")
}
