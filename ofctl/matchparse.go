// The match of a flow line as written: shorthands and key=value fields,
// stored into the match and checked for their prerequisites.

package ofctl

import (
	"fmt"
	"strings"
)

// prereqText explains a prerequisite in ovs-ofctl terms.
func prereqText(p prereq) string {
	switch p {
	case preARP:
		return "arp or rarp"
	case preIPv4:
		return "ip"
	case preIPv6:
		return "ipv6"
	case preIPAny:
		return "ip or ipv6"
	case preTCP:
		return "tcp or tcp6"
	case preUDP:
		return "udp or udp6"
	case preSCTP:
		return "sctp or sctp6"
	case preL4:
		return "tcp, udp or sctp (or their IPv6 forms)"
	case preICMPv4:
		return "icmp"
	case preICMPv6:
		return "icmp6"
	case preICMPAny:
		return "icmp or icmp6"
	case preND:
		return "icmp6 with icmp_type=135 or 136 and icmp_code=0"
	case preNDSolicit:
		return "icmp6 with icmp_type=135 and icmp_code=0"
	case preNDAdvert:
		return "icmp6 with icmp_type=136 and icmp_code=0"
	case preVLAN:
		return "a VLAN header (e.g. vlan_tci=0x1000/0x1000)"
	case preMPLS:
		return "mpls or mplsm"
	case preNSH:
		return "NSH (dl_type=0x894f or packet_type=(1,0x894f))"
	case preEther:
		return "an Ethernet packet (packet_type=(0,0), the default)"
	case preCt:
		return "a valid connection (e.g. ct_state=+est+trk)"
	case preCtIPv4:
		return "a valid connection and ip (e.g. ct_state=+est+trk,ip)"
	case preCtIPv6:
		return "a valid connection and ipv6 (e.g. ct_state=+est+trk,ipv6)"
	case preCtL4:
		return "a valid connection and ct_nw_proto"
	}
	return "nothing"
}

// setField stores a parsed value of f into the match.
func (mt *match) setField(f *field, v, m []byte) error {
	if !f.special {
		switch f.slot {
		case sCtState:
			// OVS keeps 8 bits of conntrack state and 1 public tunnel flag.
			m = andBytes(m, []byte{0, 0, 0, 0xff})
		case sTunFlags:
			m = andBytes(m, []byte{0, 1})
		}
		mt.set(f.slot, v, m)
		return nil
	}
	u, um := beUint(v), beUint(m)
	switch f.name {
	case "in_port":
		p := uint16(u)
		mt.setUint(sInPort, uint64(port11(p)))
	case "dl_vlan":
		if u > vlanVIDMask {
			return fmt.Errorf("VLAN ID %d out of range (0 to 4095)", u)
		}
		mt.setBits(sVlanTCI, u|vlanCFI, vlanVIDMask|vlanCFI)
	case "vlan_vid":
		mt.setBits(sVlanTCI, u, um&(vlanVIDMask|vlanCFI))
	case "dl_vlan_pcp", "vlan_pcp":
		mt.setBits(sVlanTCI, u<<13|vlanCFI, vlanPCPMask|vlanCFI)
	case "nw_proto":
		mt.setUint(sNwProto, u)
	case "arp_op":
		if u > 0xff {
			return fmt.Errorf("ARP opcode %d out of range (0 to 255)", u)
		}
		mt.setUint(sNwProto, u)
	case "ip_frag":
		mt.set(sNwFrag, v, m)
	case "nw_tos":
		if u&3 != 0 {
			return fmt.Errorf("nw_tos %d has ECN bits set (use a multiple of 4, or ip_dscp)", u)
		}
		mt.setBits(sNwTos, u, 0xfc)
	case "ip_dscp":
		mt.setBits(sNwTos, u<<2, 0xfc)
	case "nw_ecn":
		mt.setBits(sNwTos, u, 0x03)
	case "icmp_type", "icmpv6_type":
		mt.setUint(sTpSrc, u)
	case "icmp_code", "icmpv6_code":
		mt.setUint(sTpDst, u)
	default:
		switch {
		case len(f.name) > 4 && f.name[:4] == "xreg":
			i := int(f.hdr.field)
			mt.set(sReg0+slot(2*i), v[:4], m[:4])
			mt.set(sReg0+slot(2*i+1), v[4:], m[4:])
		case len(f.name) > 5 && f.name[:5] == "xxreg":
			i := int(f.hdr.field) - 111
			for k := 0; k < 4; k++ {
				mt.set(sReg0+slot(4*i+k), v[4*k:4*k+4], m[4*k:4*k+4])
			}
		default:
			return fmt.Errorf("field %s cannot be matched", f.name)
		}
	}
	return nil
}

// setting is a match field as written, for the prerequisite check.
type setting struct {
	f *field
	p kv
}

// parseMatchPair adds a protocol shorthand (ip, tcp, ...) or a match field
// to mt; fields go to set for checkPrereqs.
func (mt *match) parseMatchPair(p kv, set *[]setting) error {
	if sh, ok := shorthands[p.key]; ok {
		if p.delim != 0 {
			return errAt(p.keyOff, p.text(), "%s takes no value", p.key)
		}
		mt.setUint(sDlType, uint64(sh[0]))
		if sh[1] >= 0 {
			mt.setUint(sNwProto, uint64(sh[1]))
		}
		return nil
	}
	if name, rng, ok := strings.Cut(p.key, "["); ok && fieldByName[name] != nil {
		return mt.setSubfieldMatch(fieldByName[name], rng, p, set)
	}
	f := fieldByName[p.key]
	if f == nil {
		return errAt(p.keyOff, p.key, "unknown field")
	}
	if f.variable {
		if err := mt.setTunMetadata(f, p); err != nil {
			return err
		}
		*set = append(*set, setting{f, p})
		return nil
	}
	if p.delim == 0 || p.val == "" {
		return errAt(p.keyOff, p.text(), "%s needs a value", p.key)
	}
	if f.name == "dl_vlan" {
		return setDlVlan(mt, p)
	}
	v, m, err := parseFieldValue(matchField(f), p.val)
	if err != nil {
		if n, nerr := parseUint(p.val, 64); nerr == nil && truncatedInMatch[f.slot] && !f.special {
			low := putBE(n&(1<<f.bits-1), f.bytes)
			return errAt(p.valOff, p.val, "%v; OVS would match %s=%s, its low %d bits", err, f.name, formatMatchValue(f, low), f.bits)
		}
		return errAt(p.valOff, p.val, "%v", err)
	}
	if !f.special && valueAsMask[f.slot] {
		if err := mt.setValueAsMask(f, p, v, m); err != nil {
			return err
		}
		*set = append(*set, setting{f, p})
		return nil
	}
	if err := mt.setField(f, v, m); err != nil {
		return errAt(p.valOff, p.val, "%v", err)
	}
	*set = append(*set, setting{f, p})
	return nil
}

// setSubfieldMatch matches bits of a field, FIELD[A..B]=VALUE, as OVS's
// parse_subfield does: the bits join whatever the match already says
// about the field.
func (mt *match) setSubfieldMatch(f *field, rng string, p kv, set *[]setting) error {
	sf, err := bitRange(f, p.key, rng)
	if err != nil {
		return errAt(p.keyOff, p.key, "%v", err)
	}
	if f.special || f.kind == kPacketType || !f.maskable && sf.bits != f.bits {
		return errAt(p.keyOff, p.key, "field %s cannot be matched bit by bit", f.name)
	}
	if p.delim == 0 || p.val == "" {
		return errAt(p.keyOff, p.text(), "%s needs a value", p.key)
	}
	raw, err := parseUintBytes(p.val, f.bytes, sf.bits)
	if err != nil {
		return errAt(p.valOff, p.val, "%v (%s is %d bits)", err, p.key, sf.bits)
	}
	bits := shiftLeft(bitMask(f.bytes, sf.bits), sf.ofs)
	v := shiftLeft(raw, sf.ofs)
	old, oldMask := mt.val(f.slot), mt.mask(f.slot)
	nv, nm := make([]byte, f.bytes), make([]byte, f.bytes)
	for i := range nv {
		nv[i] = old[i]&^bits[i] | v[i]
		nm[i] = oldMask[i] | bits[i]
	}
	mt.set(f.slot, nv, nm)
	*set = append(*set, setting{f, p})
	return nil
}

// checkPrereqs fails when a field of set lacks its prerequisites in mt (tp_dst
// without tcp, udp or sctp).
func (mt *match) checkPrereqs(set []setting) error {
	for _, st := range set {
		pre := st.f.pre
		if st.f.name == "icmp_type" || st.f.name == "icmp_code" {
			// In a match these name the ICMPv6 type and code too.
			pre = preICMPAny
		}
		// ovs-ofctl sends these two with the field; vswitchd refuses them.
		switch {
		case mt.prereqOK(pre):
			continue
		case pre == preEther:
			return errAt(st.p.keyOff, st.p.text(), "%s needs an Ethernet packet (packet_type=(0,0), the default): vswitchd would refuse the flow (OFPBMC_BAD_PREREQ)", st.f.name)
		case mt.laterFragment() && (pre == preTCP || pre == preUDP || pre == preSCTP || pre == preL4):
			return errAt(st.p.keyOff, st.p.text(), "%s cannot be matched in a later fragment (ip_frag=later has no L4 header): vswitchd would refuse the flow (OFPBMC_BAD_PREREQ)", st.f.name)
		}
		if !mt.prereqOK(pre) {
			return errAt(st.p.keyOff, st.p.text(), "missing prerequisite: %s requires %s (OVS would leave %s out of the match)", st.f.name, prereqText(pre), st.f.name)
		}
	}
	return nil
}

// setDlVlan stores the OpenFlow 1.0 dl_vlan match: a VLAN ID, or 0xffff
// (OFP10_VLAN_NONE) for packets without a VLAN header.
func setDlVlan(mt *match, p kv) error {
	v, err := parseUint(p.val, 16)
	switch {
	case err != nil:
		return errAt(p.valOff, p.val, "bad VLAN ID (want 0 to 4095, or 65535 for no VLAN header)")
	case v == 0xffff:
		mt.setUint(sVlanTCI, 0)
	case v > vlanVIDMask:
		return errAt(p.valOff, p.val, "VLAN ID %d out of range (want 0 to 4095, or 65535 for no VLAN header); OVS would match dl_vlan=%d, its low 12 bits", v, v&vlanVIDMask)
	default:
		mt.setBits(sVlanTCI, v|vlanCFI, vlanVIDMask|vlanCFI)
	}
	return nil
}
