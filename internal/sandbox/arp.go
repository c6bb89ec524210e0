package sandbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
)

// ARP operations.
const (
	ARPRequest = 1
	ARPReply   = 2
)

// ARP is an Ethernet ARP packet (IPv4 over Ethernet), for InjectARP and as
// ReadPcapARPs returns it. For InjectARP, an empty SrcMAC is SHA, an empty
// DstMAC is the broadcast address for a request and THA for a reply, and an
// empty THA is 00:00:00:00:00:00.
type ARP struct {
	SrcMAC, DstMAC string // the Ethernet header
	Op             uint16 // ARPRequest or ARPReply
	SHA, SPA       string // sender hardware and protocol address
	THA, TPA       string // target hardware and protocol address
}

func (a ARP) String() string {
	op := map[uint16]string{ARPRequest: "request", ARPReply: "reply"}[a.Op]
	if op == "" {
		op = fmt.Sprintf("op %d", a.Op)
	}
	return fmt.Sprintf("ARP %s %s -> %s: sha=%s spa=%s tha=%s tpa=%s", op, a.SrcMAC, a.DstMAC, a.SHA, a.SPA, a.THA, a.TPA)
}

// flow renders a in the datapath flow syntax netdev-dummy/receive parses.
func (a ARP) flow() (string, error) {
	if a.Op != ARPRequest && a.Op != ARPReply {
		return "", fmt.Errorf("sandbox: ARP op %d: want %d (request) or %d (reply)", a.Op, ARPRequest, ARPReply)
	}
	if a.THA == "" {
		a.THA = "00:00:00:00:00:00"
	}
	if a.SrcMAC == "" {
		a.SrcMAC = a.SHA
	}
	if a.DstMAC == "" {
		a.DstMAC = a.THA
		if a.Op == ARPRequest {
			a.DstMAC = "ff:ff:ff:ff:ff:ff"
		}
	}
	macs := make([]net.HardwareAddr, 0, 4)
	for _, s := range []string{a.SrcMAC, a.DstMAC, a.SHA, a.THA} {
		mac, err := parseMAC(s)
		if err != nil {
			return "", err
		}
		macs = append(macs, mac)
	}
	var ips [2]netip.Addr
	for i, s := range []string{a.SPA, a.TPA} {
		ip, err := netip.ParseAddr(s)
		if err != nil || !ip.Unmap().Is4() {
			return "", fmt.Errorf("sandbox: ARP address %q: want IPv4", s)
		}
		ips[i] = ip.Unmap()
	}
	return fmt.Sprintf("eth(src=%s,dst=%s),eth_type(0x0806),arp(sip=%s,tip=%s,op=%d,sha=%s,tha=%s)",
		macs[0], macs[1], ips[0], ips[1], a.Op, macs[2], macs[3]), nil
}

// InjectARP makes port of bridge receive the ARP packet a, through
// `ovs-appctl netdev-dummy/receive`, as InjectSYN does for a SYN.
func (s *Sandbox) InjectARP(ctx context.Context, bridge, port string, a ARP) error {
	flow, err := a.flow()
	if err != nil {
		return err
	}
	return s.receive(ctx, bridge, port, flow)
}

// CaptureTx makes vswitchd write every packet the dummy interface port
// sends to a pcap file in the sandbox directory (its options:tx_pcap) and
// returns the file's path. Packets sent before the call are not in it;
// vswitchd flushes the file after each packet (ovs_pcap_write), so
// ReadPcapARPs sees a packet once port's tx counter counts it.
func (s *Sandbox) CaptureTx(ctx context.Context, port string) (string, error) {
	if port == "" || strings.ContainsAny(port, `/\`) {
		return "", fmt.Errorf("sandbox: capture: bad interface name %q", port)
	}
	path := s.path(port + "-tx.pcap")
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("sandbox: capture on %s: %w", port, err)
	}
	// Without --no-wait: ovs-vsctl returns once vswitchd opened the file.
	if _, err := s.Vsctl(ctx, "set", "Interface", port, "options:tx_pcap="+path); err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("sandbox: capture on %s: vswitchd did not open %s: %w", port, path, err)
	}
	return path, nil
}

// ReadPcapARPs returns the ARP packets of the pcap file at path (as
// CaptureTx makes), in order; other packets are skipped, and so is a last
// record that is still being written.
func ReadPcapARPs(path string) ([]ARP, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox: read pcap: %w", err)
	}
	if len(b) < 24 {
		return nil, fmt.Errorf("sandbox: read pcap %s: %w", path, io.ErrUnexpectedEOF)
	}
	// Microsecond or nanosecond timestamps (the records are alike), in
	// the writer's byte order.
	pcapMagic := func(m uint32) bool { return m == 0xa1b2c3d4 || m == 0xa1b23c4d }
	var order binary.ByteOrder
	switch {
	case pcapMagic(binary.LittleEndian.Uint32(b)):
		order = binary.LittleEndian
	case pcapMagic(binary.BigEndian.Uint32(b)):
		order = binary.BigEndian
	default:
		return nil, fmt.Errorf("sandbox: read pcap %s: not a pcap file (magic %x)", path, b[:4])
	}
	if link := order.Uint32(b[20:24]); link != 1 {
		return nil, fmt.Errorf("sandbox: read pcap %s: link type %d, want Ethernet (1)", path, link)
	}
	var out []ARP
	for rest := b[24:]; len(rest) >= 16; {
		n := int(order.Uint32(rest[8:12]))
		if len(rest) < 16+n {
			break // a record still being written
		}
		frame := rest[16 : 16+n]
		rest = rest[16+n:]
		if a, ok := parseARP(frame); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// parseARP decodes an untagged Ethernet frame of an IPv4-over-Ethernet ARP.
func parseARP(f []byte) (ARP, bool) {
	if len(f) < 14+28 || binary.BigEndian.Uint16(f[12:14]) != 0x0806 {
		return ARP{}, false
	}
	p := f[14:]
	if binary.BigEndian.Uint16(p[0:2]) != 1 || binary.BigEndian.Uint16(p[2:4]) != 0x0800 || p[4] != 6 || p[5] != 4 {
		return ARP{}, false
	}
	ip := func(b []byte) string { return netip.AddrFrom4([4]byte(b)).String() }
	return ARP{
		DstMAC: net.HardwareAddr(f[0:6]).String(),
		SrcMAC: net.HardwareAddr(f[6:12]).String(),
		Op:     binary.BigEndian.Uint16(p[6:8]),
		SHA:    net.HardwareAddr(p[8:14]).String(),
		SPA:    ip(p[14:18]),
		THA:    net.HardwareAddr(p[18:24]).String(),
		TPA:    ip(p[24:28]),
	}, true
}
