package ofctl

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

const defaultPriority = 0x8000

// formatHex prints a big-endian value as OVS's ds_put_hex does: 0x followed
// by the digits without leading zeros, or "0".
func formatHex(b []byte) string {
	i := 0
	for i < len(b) && b[i] == 0 {
		i++
	}
	if i == len(b) {
		return "0"
	}
	var sb strings.Builder
	sb.WriteString("0x")
	sb.WriteString(strconv.FormatUint(uint64(b[i]), 16))
	for _, c := range b[i+1:] {
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String()
}

// formatHexC prints like C's "%#x": 0x-prefixed, but plain "0" for zero.
func formatHexC(v uint64) string {
	if v == 0 {
		return "0"
	}
	return "0x" + strconv.FormatUint(v, 16)
}

func formatEth(b []byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5])
}

func formatEthMasked(v, m []byte) string {
	if isOnes(m) {
		return formatEth(v)
	}
	return formatEth(v) + "/" + formatEth(m)
}

func formatIPv4(b []byte) string {
	return netip.AddrFrom4([4]byte(b)).String()
}

func formatIPv6(b []byte) string {
	return netip.AddrFrom16([16]byte(b)).String()
}

// formatIPMasked prints an address with a CIDR prefix when the mask is one,
// else with the mask, as OVS's ip_format_masked and ipv6_format_masked do.
func formatIPMasked(v, m []byte) string {
	f := formatIPv4
	if len(v) == 16 {
		f = formatIPv6
	}
	if isOnes(m) {
		return f(v)
	}
	if n := prefixLen(m); n >= 0 {
		return f(v) + "/" + strconv.Itoa(n)
	}
	return f(v) + "/" + f(m)
}

// formatFlagsMasked prints "+a-b" for the bits of mask, lowest bit first.
func formatFlagsMasked(v, m uint64, names []string) string {
	if m == 0 {
		return "0/0"
	}
	var sb strings.Builder
	for bit := 0; bit < 64; bit++ {
		if m&(1<<bit) == 0 {
			continue
		}
		if v&(1<<bit) != 0 {
			sb.WriteByte('+')
		} else {
			sb.WriteByte('-')
		}
		if bit < len(names) {
			sb.WriteString(names[bit])
		} else {
			sb.WriteString("[Unknown]")
		}
	}
	return sb.String()
}

// formatFlags prints the set bits of v joined by sep, or "0".
func formatFlags(v uint64, names []string, sep string) string {
	if v == 0 {
		return "0"
	}
	var parts []string
	for bit := 0; bit < 64; bit++ {
		if v&(1<<bit) == 0 {
			continue
		}
		if bit < len(names) {
			parts = append(parts, names[bit])
		} else {
			parts = append(parts, fmt.Sprintf("0x%x", uint64(1)<<bit))
		}
	}
	return strings.Join(parts, sep)
}

// matchWriter accumulates "name=value," pieces.
type matchWriter struct{ sb strings.Builder }

func (w *matchWriter) add(name, val string) {
	w.sb.WriteString(name)
	if val != "" {
		w.sb.WriteByte('=')
		w.sb.WriteString(val)
	}
	w.sb.WriteByte(',')
}

// u32 is OVS's format_uint32_masked.
func (w *matchWriter) u32(name string, v, m uint64) {
	if m == 0 {
		return
	}
	s := formatHexC(v)
	if m != 0xffffffff {
		s += "/" + formatHexC(m)
	}
	w.add(name, s)
}

// u64 is OVS's format_be64_masked.
func (w *matchWriter) u64(name string, v, m uint64) {
	if m == 0 {
		return
	}
	s := formatHexC(v)
	if m != ^uint64(0) {
		s += "/" + formatHexC(m)
	}
	w.add(name, s)
}

// u16 is OVS's format_be16_masked / format_uint16_masked.
func (w *matchWriter) u16(name string, v, m uint64) {
	if m == 0 {
		return
	}
	if m == 0xffff {
		w.add(name, strconv.FormatUint(v, 10))
		return
	}
	w.add(name, fmt.Sprintf("0x%x/0x%x", v, m))
}

func (w *matchWriter) eth(name string, v, m []byte) {
	if !isZero(m) {
		w.add(name, formatEthMasked(v, m))
	}
}

func (w *matchWriter) ip(name string, v, m []byte) {
	if !isZero(m) {
		w.add(name, formatIPMasked(v, m))
	}
}

// format prints the match as OVS's match_format does, priority first.
func (mt *match) format(priority uint16) string {
	w := new(matchWriter)
	if priority != defaultPriority {
		w.add("priority", strconv.Itoa(int(priority)))
	}
	w.u32("pkt_mark", mt.u(sPktMark), mt.um(sPktMark))
	if mt.has(sConjID) {
		w.add("conj_id", strconv.FormatUint(mt.u(sConjID), 10))
	}
	if mt.has(sActsetOutput) {
		w.add("actset_output", formatPort11(uint32(mt.u(sActsetOutput))))
	}
	if mt.has(sCtState) {
		v, m := mt.u(sCtState), mt.um(sCtState)
		// OVS keeps 8 bits of ct_state.
		v, m = v&0xff, m&0xff
		if m == 0xff {
			w.add("ct_state", formatFlags(v, ctStateFlags, "|"))
		} else {
			w.add("ct_state", formatFlagsMasked(v, m, ctStateFlags))
		}
	}
	if mt.has(sCtZone) {
		w.u16("ct_zone", mt.u(sCtZone), mt.um(sCtZone))
	}
	w.u32("ct_mark", mt.u(sCtMark), mt.um(sCtMark))
	if mt.has(sCtLabel) {
		s := formatHex(mt.val(sCtLabel))
		if !isOnes(mt.mask(sCtLabel)) {
			s += "/" + formatHex(mt.mask(sCtLabel))
		}
		w.add("ct_label", s)
	}
	w.ip("ct_nw_src", mt.val(sCtNwSrc), mt.mask(sCtNwSrc))
	w.ip("ct_ipv6_src", mt.val(sCtIPv6Src), mt.mask(sCtIPv6Src))
	w.ip("ct_nw_dst", mt.val(sCtNwDst), mt.mask(sCtNwDst))
	w.ip("ct_ipv6_dst", mt.val(sCtIPv6Dst), mt.mask(sCtIPv6Dst))
	if mt.has(sCtNwProto) {
		w.add("ct_nw_proto", strconv.FormatUint(mt.u(sCtNwProto), 10))
		w.u16("ct_tp_src", mt.u(sCtTpSrc), mt.um(sCtTpSrc))
		w.u16("ct_tp_dst", mt.u(sCtTpDst), mt.um(sCtTpDst))
	}

	if mt.has(sPacketType) && !mt.defaultPacketType() {
		w.add("packet_type", formatPacketType(uint32(mt.u(sPacketType))))
	}
	// The shorthand (ip, tcp, ...) stands for the eth_type field; the
	// rest of the match is named after the Ethernet type the match
	// implies, which a packet_type may give.
	_, hasType := mt.dlTypeField()
	dlType, hasEff := mt.dlType()
	skipType, skipProto := false, false
	if hasType {
		skipType = true
		proto, hasProto := uint8(mt.u(sNwProto)), mt.has(sNwProto)
		switch dlType {
		case ethIP:
			name := "ip"
			if hasProto {
				skipProto = true
				switch proto {
				case protoICMP:
					name = "icmp"
				case protoTCP:
					name = "tcp"
				case protoUDP:
					name = "udp"
				case protoSCTP:
					name = "sctp"
				default:
					skipProto = false
				}
			}
			w.add(name, "")
		case ethIPv6:
			name := "ipv6"
			if hasProto {
				skipProto = true
				switch proto {
				case protoICMPv6:
					name = "icmp6"
				case protoTCP:
					name = "tcp6"
				case protoUDP:
					name = "udp6"
				case protoSCTP:
					name = "sctp6"
				default:
					skipProto = false
				}
			}
			w.add(name, "")
		case ethARP:
			w.add("arp", "")
		case ethRARP:
			w.add("rarp", "")
		case ethMPLS:
			w.add("mpls", "")
		case ethMPLM:
			w.add("mplsm", "")
		default:
			skipType = false
		}
	}
	for i := 0; i < 16; i++ {
		s := sReg0 + slot(i)
		w.u32("reg"+itoa(i), mt.u(s), mt.um(s))
	}

	// Tunnel fields, as OVS's format_flow_tunnel.
	w.u64("tun_id", mt.u(sTunID), mt.um(sTunID))
	w.ip("tun_src", mt.val(sTunSrc), mt.mask(sTunSrc))
	w.ip("tun_dst", mt.val(sTunDst), mt.mask(sTunDst))
	w.ip("tun_ipv6_src", mt.val(sTunIPv6Src), mt.mask(sTunIPv6Src))
	w.ip("tun_ipv6_dst", mt.val(sTunIPv6Dst), mt.mask(sTunIPv6Dst))
	if mt.has(sTunGbpID) {
		w.u16("tun_gbp_id", mt.u(sTunGbpID), mt.um(sTunGbpID))
	}
	if mt.has(sTunGbpFlags) {
		w.add("tun_gbp_flags", formatHexC(mt.u(sTunGbpFlags)))
	}
	mt.formatErspanGtpu(w)
	if fm := mt.um(sTunFlags) & 1; fm != 0 {
		w.add("tun_flags", formatFlagsMasked(mt.u(sTunFlags)&1, fm, tunFlagNames))
	}
	mt.formatTunMetadata(w)

	w.u64("metadata", mt.u(sMetadata), mt.um(sMetadata))
	if mt.has(sInPort) {
		w.add("in_port", formatPort11(uint32(mt.u(sInPort))))
	}
	if tm := uint16(mt.um(sVlanTCI)); tm != 0 {
		tci := uint16(mt.u(sVlanTCI))
		vidMask, pcpMask, cfi := tm&vlanVIDMask, tm&vlanPCPMask, tm&vlanCFI
		switch {
		case cfi != 0 && tci&vlanCFI != 0 && (vidMask == 0 || vidMask == vlanVIDMask) &&
			(pcpMask == 0 || pcpMask == vlanPCPMask) && (vidMask != 0 || pcpMask != 0):
			if vidMask != 0 {
				w.add("dl_vlan", strconv.Itoa(int(tci&vlanVIDMask)))
			}
			if pcpMask != 0 {
				w.add("dl_vlan_pcp", strconv.Itoa(int(tci>>13)))
			}
		case tm == 0xffff:
			w.add("vlan_tci", fmt.Sprintf("0x%04x", tci))
		default:
			w.add("vlan_tci", fmt.Sprintf("0x%04x/0x%04x", tci, tm))
		}
	}
	w.eth("dl_src", mt.val(sDlSrc), mt.mask(sDlSrc))
	w.eth("dl_dst", mt.val(sDlDst), mt.mask(sDlDst))
	if !skipType && hasType {
		w.add("dl_type", fmt.Sprintf("0x%04x", dlType))
	}
	isARP := hasEff && (dlType == ethARP || dlType == ethRARP)
	switch {
	case hasEff && dlType == ethIPv6:
		w.ip("ipv6_src", mt.val(sIPv6Src), mt.mask(sIPv6Src))
		w.ip("ipv6_dst", mt.val(sIPv6Dst), mt.mask(sIPv6Dst))
		if lm := mt.um(sIPv6Label); lm != 0 {
			if lm == 0xffffffff {
				w.add("ipv6_label", fmt.Sprintf("0x%05x", mt.u(sIPv6Label)))
			} else {
				w.add("ipv6_label", fmt.Sprintf("0x%05x/0x%05x", mt.u(sIPv6Label), lm))
			}
		}
	case isARP:
		w.ip("arp_spa", mt.val(sNwSrc), mt.mask(sNwSrc))
		w.ip("arp_tpa", mt.val(sNwDst), mt.mask(sNwDst))
	case hasEff && dlType == ethNSH:
		mt.formatNSH(w)
	default:
		w.ip("nw_src", mt.val(sNwSrc), mt.mask(sNwSrc))
		w.ip("nw_dst", mt.val(sNwDst), mt.mask(sNwDst))
	}
	if !skipProto && mt.has(sNwProto) {
		if isARP {
			w.add("arp_op", strconv.FormatUint(mt.u(sNwProto), 10))
		} else {
			w.add("nw_proto", strconv.FormatUint(mt.u(sNwProto), 10))
		}
	}
	if isARP {
		w.eth("arp_sha", mt.val(sArpSha), mt.mask(sArpSha))
		w.eth("arp_tha", mt.val(sArpTha), mt.mask(sArpTha))
	}
	tos, tosMask := mt.u(sNwTos), mt.um(sNwTos)
	if tosMask&0xfc != 0 {
		w.add("nw_tos", strconv.FormatUint(tos&0xfc, 10))
	}
	if tosMask&0x03 != 0 {
		w.add("nw_ecn", strconv.FormatUint(tos&0x03, 10))
	}
	if mt.has(sNwTTL) {
		w.add("nw_ttl", strconv.FormatUint(mt.u(sNwTTL), 10))
	}
	for _, s := range []slot{sMplsLabel, sMplsTC, sMplsTTL, sMplsBOS} {
		if mt.has(s) {
			w.add(fieldBySlot[s].name, strconv.FormatUint(mt.u(s), 10))
		}
	}
	frag, fragMask := mt.u(sNwFrag)&3, mt.um(sNwFrag)&3
	switch fragMask {
	case 3:
		switch frag {
		case 0:
			w.add("nw_frag", "no")
		case 1:
			w.add("nw_frag", "first")
		case 3:
			w.add("nw_frag", "later")
		default:
			w.add("nw_frag", "<error>")
		}
	case 1:
		if frag&1 != 0 {
			w.add("nw_frag", "yes")
		} else {
			w.add("nw_frag", "no")
		}
	case 2:
		if frag&2 != 0 {
			w.add("nw_frag", "later")
		} else {
			w.add("nw_frag", "not_later")
		}
	}
	proto := uint8(mt.u(sNwProto))
	switch {
	case hasEff && dlType == ethIP && proto == protoICMP:
		w.u16("icmp_type", mt.u(sTpSrc), mt.um(sTpSrc))
		w.u16("icmp_code", mt.u(sTpDst), mt.um(sTpDst))
	case hasEff && dlType == ethIPv6 && proto == protoICMPv6:
		w.u16("icmp_type", mt.u(sTpSrc), mt.um(sTpSrc))
		w.u16("icmp_code", mt.u(sTpDst), mt.um(sTpDst))
		w.ip("nd_target", mt.val(sNdTarget), mt.mask(sNdTarget))
		w.eth("nd_sll", mt.val(sArpSha), mt.mask(sArpSha))
		w.eth("nd_tll", mt.val(sArpTha), mt.mask(sArpTha))
	default:
		w.u16("tp_src", mt.u(sTpSrc), mt.um(sTpSrc))
		w.u16("tp_dst", mt.u(sTpDst), mt.um(sTpDst))
	}
	if mt.isIPAny() && proto == protoTCP && mt.has(sTCPFlags) {
		fm := mt.um(sTCPFlags) & 0xfff
		fv := mt.u(sTCPFlags) & 0xfff
		if fm == 0xfff {
			w.add("tcp_flags", formatFlags(fv, tcpFlagNames, "|"))
		} else {
			w.add("tcp_flags", formatFlagsMasked(fv, fm, tcpFlagNames))
		}
	}
	return strings.TrimSuffix(w.sb.String(), ",")
}

// formatPort11 prints an OpenFlow 1.1+ port number.
func formatPort11(p uint32) string {
	if q, ok := port10(p); ok {
		return formatPort(q)
	}
	return strconv.FormatUint(uint64(p), 10)
}
