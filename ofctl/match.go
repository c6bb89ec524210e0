package ofctl

import (
	"encoding/binary"
	"fmt"
)

// Ethernet types with shorthand names.
const (
	ethIP   = 0x0800
	ethARP  = 0x0806
	ethRARP = 0x8035
	ethIPv6 = 0x86dd
	ethMPLS = 0x8847
	ethMPLM = 0x8848
)

// IP protocols with shorthand names.
const (
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
	protoSCTP   = 132
)

// VLAN TCI bits.
const (
	vlanCFI     = 0x1000
	vlanVIDMask = 0x0fff
	vlanPCPMask = 0xe000
)

// match is a flow match in OVS's model: a value and a mask per slot. A slot
// whose mask is zero is not matched.
type match struct {
	v, m [nSlots][16]byte
	md   map[int]mdMatch // tun_metadata matches by field number
	tlv  TLVMap          // the bridge's option lengths, if known
}

// reset empties mt; clearing the arrays on their own spares the write
// barriers of assigning a whole match.
func (mt *match) reset() {
	clear(mt.v[:])
	clear(mt.m[:])
	mt.md, mt.tlv = nil, nil
}

func (mt *match) val(s slot) []byte  { return mt.v[s][:slotWidth[s]] }
func (mt *match) mask(s slot) []byte { return mt.m[s][:slotWidth[s]] }
func (mt *match) has(s slot) bool    { return mt.m[s] != [16]byte{} && !isZero(mt.mask(s)) }
func (mt *match) u(s slot) uint64    { return beUint(mt.val(s)) }
func (mt *match) um(s slot) uint64   { return beUint(mt.mask(s)) }

// set stores value&mask and mask in slot s.
func (mt *match) set(s slot, v, m []byte) {
	w := slotWidth[s]
	for i := 0; i < w; i++ {
		mt.m[s][i] = m[i]
		mt.v[s][i] = v[i] & m[i]
	}
}

// setBits replaces the bits of slot s selected by bits with value v (already
// aligned) and adds bits to the mask.
func (mt *match) setBits(s slot, v, bits uint64) {
	cv, cm := mt.u(s), mt.um(s)
	mt.setU(s, cv&^bits|v&bits, cm|bits)
}

func (mt *match) setUint(s slot, v uint64) {
	mt.setU(s, v, ^uint64(0))
}

// setU is set of a value and mask given as numbers (their low bytes as
// wide as the slot), written in place rather than through putBE.
func (mt *match) setU(s slot, v, m uint64) {
	for i := slotWidth[s] - 1; i >= 0; i-- {
		mt.m[s][i] = byte(m)
		mt.v[s][i] = byte(v & m)
		v >>= 8
		m >>= 8
	}
}

// dlType returns the Ethernet type the match implies, as OVS's get_dl_type
// does: the type of a packet_type in the Ethernet-type namespace, else the
// eth_type field.
func (mt *match) dlType() (uint16, bool) {
	if pt := mt.u(sPacketType); mt.has(sPacketType) && pt>>16 == ptNsEther {
		return uint16(pt), true
	}
	return mt.dlTypeField()
}

// dlTypeField returns the eth_type field itself.
func (mt *match) dlTypeField() (uint16, bool) {
	if !mt.has(sDlType) {
		return 0, false
	}
	return uint16(mt.u(sDlType)), true
}

func (mt *match) isIPv4() bool { t, ok := mt.dlType(); return ok && t == ethIP }
func (mt *match) isIPv6() bool { t, ok := mt.dlType(); return ok && t == ethIPv6 }
func (mt *match) isIPAny() bool {
	return mt.isIPv4() || mt.isIPv6()
}
func (mt *match) isARP() bool {
	t, ok := mt.dlType()
	return ok && (t == ethARP || t == ethRARP)
}

// laterFragment reports whether the match says the packet is a later IP
// fragment (ip_frag=later), which has no L4 header: OVS's prerequisites of
// the TCP, UDP and SCTP fields check that bit of the value.
func (mt *match) laterFragment() bool { return mt.u(sNwFrag)&2 != 0 }

// proto returns the matched IP protocol, if any.
func (mt *match) proto() (uint8, bool) {
	if !mt.isIPAny() || !mt.has(sNwProto) {
		return 0, false
	}
	return uint8(mt.u(sNwProto)), true
}

func (mt *match) isProto(p uint8) bool {
	q, ok := mt.proto()
	return ok && q == p
}

// Connection tracking state bits.
const (
	csNew     = 0x01
	csEst     = 0x02
	csRel     = 0x04
	csRpl     = 0x08
	csInv     = 0x10
	csTrk     = 0x20
	csSrcNAT  = 0x40
	csDstNAT  = 0x80
	csValidOf = csNew | csEst | csRel | csRpl | csSrcNAT | csDstNAT
)

// ctValid reports whether the match implies a valid conntrack entry, as
// OVS's is_ct_valid does for a match.
func (mt *match) ctValid() bool {
	v, m := mt.u(sCtState), mt.um(sCtState)
	return v&csValidOf != 0 || v&csTrk != 0 && m&csInv != 0 && v&csInv == 0
}

// prereqOK reports whether the match satisfies p, the way OVS's
// mf_are_prereqs_ok does (unmatched fields count as zero).
func (mt *match) prereqOK(p prereq) bool {
	switch p {
	case preNone:
		return true
	case preARP:
		return mt.isARP()
	case preIPv4:
		return mt.isIPv4()
	case preIPv6:
		return mt.isIPv6()
	case preIPAny:
		return mt.isIPAny()
	case preTCP:
		return mt.isProto(protoTCP) && !mt.laterFragment()
	case preUDP:
		return mt.isProto(protoUDP) && !mt.laterFragment()
	case preSCTP:
		return mt.isProto(protoSCTP) && !mt.laterFragment()
	case preL4:
		return (mt.isProto(protoTCP) || mt.isProto(protoUDP) || mt.isProto(protoSCTP)) && !mt.laterFragment()
	case preEther:
		return mt.u(sPacketType) == ptEth
	case preICMPv4:
		return mt.isIPv4() && mt.isProto(protoICMP)
	case preICMPv6:
		return mt.isIPv6() && mt.isProto(protoICMPv6)
	case preICMPAny:
		return mt.isIPv4() && mt.isProto(protoICMP) || mt.isIPv6() && mt.isProto(protoICMPv6)
	case preND, preNDSolicit, preNDAdvert:
		if !(mt.isIPv6() && mt.isProto(protoICMPv6)) || mt.u(sTpDst) != 0 {
			return false
		}
		t := mt.u(sTpSrc)
		switch p {
		case preNDSolicit:
			return t == 135
		case preNDAdvert:
			return t == 136
		}
		return t == 135 || t == 136
	case preVLAN:
		return mt.u(sVlanTCI)&vlanCFI != 0
	case preMPLS:
		t, ok := mt.dlType()
		return ok && (t == ethMPLS || t == ethMPLM)
	case preNSH:
		t, ok := mt.dlType()
		return ok && t == ethNSH
	case preCt:
		return mt.ctValid()
	case preCtIPv4:
		return mt.ctValid() && mt.isIPv4()
	case preCtIPv6:
		return mt.ctValid() && mt.isIPv6()
	case preCtL4:
		return mt.ctValid() && mt.u(sCtNwProto) != 0
	}
	return false
}

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

// oxm is one encoded match field: header, value and optional mask.
type oxm struct {
	hdr  oxmHdr
	v, m []byte // m is nil for an exact match
}

// oxmList collects encoded fields; their values and masks are copied into
// one arena rather than allocated one by one.
type oxmList struct {
	fs  []oxm
	buf []byte
}

// clip copies b into the arena, non-nil even when empty.
func (l *oxmList) clip(b []byte) []byte {
	if l.buf == nil {
		l.buf = make([]byte, 0, 64)
	}
	n := len(l.buf)
	l.buf = append(l.buf, b...)
	return l.buf[n:len(l.buf):len(l.buf)]
}

// add appends a field with a copy of v and of m, nil for an exact match.
func (l *oxmList) add(hdr oxmHdr, v, m []byte) {
	if l.fs == nil {
		l.fs = make([]oxm, 0, 8)
	}
	f := oxm{hdr: hdr, v: l.clip(v)}
	if m != nil {
		f.m = l.clip(m)
	}
	l.fs = append(l.fs, f)
}

// put appends hdr with v/m unless the mask is all zeros; an all-ones mask
// gives an exact match, as OVS's nxm_put does.
func (l *oxmList) put(hdr oxmHdr, v, m []byte) {
	if isZero(m) {
		return
	}
	if isOnes(m) {
		l.add(hdr, v, nil)
		return
	}
	l.add(hdr, v, m)
	f := &l.fs[len(l.fs)-1]
	for i := range f.v {
		f.v[i] &= m[i]
	}
}

// putSlot is put of slot s of mt, with a quick look at an unmatched slot:
// most of the slots encodeTo visits are.
func (l *oxmList) putSlot(mt *match, hdr oxmHdr, s slot) {
	if mt.m[s] == [16]byte{} {
		return
	}
	l.put(hdr, mt.val(s), mt.mask(s))
}

func (l *oxmList) putExact(hdr oxmHdr, v []byte) {
	l.add(hdr, v, nil)
}

// encodeTo puts the match into l as OpenFlow 1.5 OXM fields, in the order
// OVS's nx_put_raw emits them.
func (mt *match) encodeTo(l *oxmList) {
	if mt.has(sPacketType) && !mt.defaultPacketType() {
		l.putExact(oxmHdr{clsOXM, 44}, mt.val(sPacketType))
	}
	if mt.has(sConjID) {
		l.putExact(oxmHdr{clsNXM1, 37}, mt.val(sConjID))
	}
	if mt.has(sInPort) {
		l.putExact(oxmHdr{clsOXM, 0}, mt.val(sInPort))
	}
	if mt.has(sActsetOutput) {
		l.putExact(oxmHdr{clsOXM, 43}, mt.val(sActsetOutput))
	}
	l.putSlot(mt, oxmHdr{clsOXM, 4}, sDlSrc)
	l.putSlot(mt, oxmHdr{clsOXM, 3}, sDlDst)
	l.putSlot(mt, oxmHdr{clsOXM, 5}, sDlType)

	tci, tciMask := uint16(mt.u(sVlanTCI)), uint16(mt.um(sVlanTCI))
	vid, vidMask := tci&(vlanVIDMask|vlanCFI), tciMask&(vlanVIDMask|vlanCFI)
	if vidMask == vlanVIDMask|vlanCFI {
		l.putExact(oxmHdr{clsOXM, 6}, putBE(uint64(vid), 2))
	} else if vidMask != 0 {
		l.add(oxmHdr{clsOXM, 6}, putBE(uint64(vid), 2), putBE(uint64(vidMask), 2))
	}
	if vid != 0 && tciMask&vlanPCPMask != 0 {
		l.putExact(oxmHdr{clsOXM, 7}, []byte{byte(tci >> 13)})
	}

	if t, ok := mt.dlType(); ok && (t == ethMPLS || t == ethMPLM) {
		// OVS puts the MPLS fields exact, in this order.
		for _, s := range []slot{sMplsTC, sMplsBOS, sMplsTTL, sMplsLabel} {
			if mt.has(s) {
				l.putExact(fieldBySlot[s].hdr, mt.val(s))
			}
		}
	}

	switch {
	case mt.isIPAny():
		mt.encodeIP(l)
	case mt.isARP():
		if mt.has(sNwProto) {
			l.putExact(oxmHdr{clsOXM, 21}, putBE(mt.u(sNwProto), 2))
		}
		l.putSlot(mt, oxmHdr{clsOXM, 22}, sNwSrc)
		l.putSlot(mt, oxmHdr{clsOXM, 23}, sNwDst)
		l.putSlot(mt, oxmHdr{clsOXM, 24}, sArpSha)
		l.putSlot(mt, oxmHdr{clsOXM, 25}, sArpTha)
	}

	l.putSlot(mt, oxmHdr{clsOXM, 38}, sTunID)
	l.putSlot(mt, oxmHdr{clsNXM1, 104}, sTunFlags)
	l.putSlot(mt, oxmHdr{clsNXM1, 31}, sTunSrc)
	l.putSlot(mt, oxmHdr{clsNXM1, 32}, sTunDst)
	l.putSlot(mt, oxmHdr{clsNXM1, 109}, sTunIPv6Src)
	l.putSlot(mt, oxmHdr{clsNXM1, 110}, sTunIPv6Dst)
	l.putSlot(mt, oxmHdr{clsNXM1, 38}, sTunGbpID)
	l.putSlot(mt, oxmHdr{clsNXM1, 39}, sTunGbpFlags)
	mt.encodeTunMetadata(l)
	for _, s := range []slot{sTunErspanIdx, sTunErspanVer, sTunErspanDir, sTunErspanHwid, sTunGtpuFlags, sTunGtpuMsgtype,
		sNshFlags, sNshTTL, sNshMdtype, sNshNp, sNshSPI, sNshSI, sNshC1, sNshC1 + 1, sNshC1 + 2, sNshC1 + 3} {
		l.putSlot(mt, fieldBySlot[s].hdr, s)
	}

	// OpenFlow 1.5 carries registers in pairs as 64-bit packet registers.
	for i := 0; i < 8; i++ {
		hi, lo := sReg0+slot(2*i), sReg0+slot(2*i+1)
		if mt.m[hi] == [16]byte{} && mt.m[lo] == [16]byte{} {
			continue
		}
		var v, m [8]byte
		copy(v[:4], mt.val(hi))
		copy(v[4:], mt.val(lo))
		copy(m[:4], mt.mask(hi))
		copy(m[4:], mt.mask(lo))
		l.put(oxmHdr{clsPktRg, uint8(i)}, v[:], m[:])
	}

	l.putSlot(mt, oxmHdr{clsNXM1, 33}, sPktMark)
	l.putSlot(mt, oxmHdr{clsNXM1, 105}, sCtState)
	l.putSlot(mt, oxmHdr{clsNXM1, 106}, sCtZone)
	l.putSlot(mt, oxmHdr{clsNXM1, 107}, sCtMark)
	l.putSlot(mt, oxmHdr{clsNXM1, 108}, sCtLabel)
	l.putSlot(mt, oxmHdr{clsNXM1, 120}, sCtNwSrc)
	l.putSlot(mt, oxmHdr{clsNXM1, 122}, sCtIPv6Src)
	l.putSlot(mt, oxmHdr{clsNXM1, 121}, sCtNwDst)
	l.putSlot(mt, oxmHdr{clsNXM1, 123}, sCtIPv6Dst)
	if mt.u(sCtNwProto) != 0 {
		l.putSlot(mt, oxmHdr{clsNXM1, 119}, sCtNwProto)
		l.putSlot(mt, oxmHdr{clsNXM1, 124}, sCtTpSrc)
		l.putSlot(mt, oxmHdr{clsNXM1, 125}, sCtTpDst)
	}
	l.putSlot(mt, oxmHdr{clsOXM, 2}, sMetadata)
}

func (mt *match) encodeIP(l *oxmList) {
	if mt.isIPv4() {
		l.putSlot(mt, oxmHdr{clsOXM, 11}, sNwSrc)
		l.putSlot(mt, oxmHdr{clsOXM, 12}, sNwDst)
	} else {
		l.putSlot(mt, oxmHdr{clsOXM, 26}, sIPv6Src)
		l.putSlot(mt, oxmHdr{clsOXM, 27}, sIPv6Dst)
	}
	if fm := mt.um(sNwFrag) & 3; fm != 0 {
		m := fm
		if fm == 3 {
			m = 0xff
		}
		l.put(oxmHdr{clsNXM1, 26}, []byte{byte(mt.u(sNwFrag) & 3)}, []byte{byte(m)})
	}
	tos, tosMask := mt.u(sNwTos), mt.um(sNwTos)
	if tosMask&0xfc != 0 {
		l.putExact(oxmHdr{clsOXM, 8}, []byte{byte(tos >> 2)})
	}
	if tosMask&0x03 != 0 {
		l.putExact(oxmHdr{clsOXM, 9}, []byte{byte(tos & 3)})
	}
	if mt.has(sNwTTL) {
		l.putExact(oxmHdr{clsNXM1, 29}, mt.val(sNwTTL))
	}
	l.putSlot(mt, oxmHdr{clsOXM, 28}, sIPv6Label)
	if !mt.has(sNwProto) {
		return
	}
	proto := uint8(mt.u(sNwProto))
	l.putExact(oxmHdr{clsOXM, 10}, []byte{proto})
	switch {
	case proto == protoTCP:
		l.putSlot(mt, oxmHdr{clsOXM, 13}, sTpSrc)
		l.putSlot(mt, oxmHdr{clsOXM, 14}, sTpDst)
		l.putSlot(mt, oxmHdr{clsOXM, 42}, sTCPFlags)
	case proto == protoUDP:
		l.putSlot(mt, oxmHdr{clsOXM, 15}, sTpSrc)
		l.putSlot(mt, oxmHdr{clsOXM, 16}, sTpDst)
	case proto == protoSCTP:
		l.putSlot(mt, oxmHdr{clsOXM, 17}, sTpSrc)
		l.putSlot(mt, oxmHdr{clsOXM, 18}, sTpDst)
	case proto == protoICMP && mt.isIPv4():
		if mt.has(sTpSrc) {
			l.putExact(oxmHdr{clsOXM, 19}, []byte{byte(mt.u(sTpSrc))})
		}
		if mt.has(sTpDst) {
			l.putExact(oxmHdr{clsOXM, 20}, []byte{byte(mt.u(sTpDst))})
		}
	case proto == protoICMPv6 && mt.isIPv6():
		if mt.has(sTpSrc) {
			l.putExact(oxmHdr{clsOXM, 29}, []byte{byte(mt.u(sTpSrc))})
		}
		if mt.has(sTpDst) {
			l.putExact(oxmHdr{clsOXM, 30}, []byte{byte(mt.u(sTpDst))})
		}
		if mt.prereqOK(preND) {
			l.putSlot(mt, oxmHdr{clsOXM, 31}, sNdTarget)
			if mt.u(sTpSrc) == 135 {
				l.putSlot(mt, oxmHdr{clsOXM, 32}, sArpSha)
			}
			if mt.u(sTpSrc) == 136 {
				l.putSlot(mt, oxmHdr{clsOXM, 33}, sArpTha)
			}
		}
	}
}

// appendOXMHeader appends the header of an OXM with an n-byte body (value
// and mask); an experimenter OXM gets its experimenter id too.
func appendOXMHeader(b []byte, h oxmHdr, masked bool, n int) []byte {
	fb := h.field << 1
	if masked {
		fb |= 1
	}
	if h.isExperimenter() {
		b = append(b, 0xff, 0xff, fb, byte(n+4))
		return binary.BigEndian.AppendUint32(b, experimenterIDs[h.class])
	}
	return append(b, byte(h.class>>8), byte(h.class), fb, byte(n))
}

// defaultPacketType reports whether the match says packet_type=(0,0)
// exactly, which OVS leaves out of the encoding when another field implies
// Ethernet.
func (mt *match) defaultPacketType() bool {
	return isOnes(mt.mask(sPacketType)) && mt.u(sPacketType) == ptEth
}

// decodeOXMs parses OXM fields (without the ofp_match header) into a match,
// mapping each wire field back to its slot as OVS's nx_pull_raw does.
func decodeOXMs(b []byte) (*match, error) {
	mt := new(match)
	if err := mt.decodeOXMs(b); err != nil {
		return nil, err
	}
	return mt, nil
}

// allOnes backs the mask of an exact field being decoded; never written.
var allOnes = ones(255)

// decodeOXMs is decodeOXMs into mt, which must be empty.
func (mt *match) decodeOXMs(b []byte) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return fmt.Errorf("truncated match field header")
		}
		class := uint32(binary.BigEndian.Uint16(b))
		fb, n := b[2], int(b[3])
		b = b[4:]
		if len(b) < n {
			return fmt.Errorf("truncated match field")
		}
		body := b[:n]
		b = b[n:]
		h := oxmHdr{class, fb >> 1}
		if class == 0xffff {
			var err error
			if h, body, err = pullExperimenter(fb>>1, body); err != nil {
				return err
			}
			n = len(body)
		}
		var v, m []byte
		if fb&1 != 0 {
			if n%2 != 0 {
				return fmt.Errorf("bad masked match field length %d", n)
			}
			v, m = body[:n/2], body[n/2:]
		} else {
			v, m = body, allOnes[:n:n]
		}
		if h.class == clsNXM1 && h.field >= tunMDFirstNX && h.field < tunMDFirstNX+tunMDFields {
			mt.decodeTunMetadata(int(h.field)-tunMDFirstNX, v, m, fb&1 != 0)
			continue
		}
		if err := mt.decodeField(h, v, m); err != nil {
			return err
		}
	}
	return nil
}

func (mt *match) decodeField(h oxmHdr, v, m []byte) error {
	want := func(n int) error {
		if len(v) != n {
			return fmt.Errorf("match field %d:%d has length %d, want %d", h.class, h.field, len(v), n)
		}
		return nil
	}
	setSlot := func(s slot) error {
		if err := want(slotWidth[s]); err != nil {
			return err
		}
		mt.set(s, v, m)
		return nil
	}
	switch h {
	case oxmHdr{clsOXM, 0}:
		return setSlot(sInPort)
	case oxmHdr{clsOXM, 6}:
		if err := want(2); err != nil {
			return err
		}
		mt.setBits(sVlanTCI, beUint(v), beUint(m)&(vlanVIDMask|vlanCFI))
		return nil
	case oxmHdr{clsOXM, 7}:
		if err := want(1); err != nil {
			return err
		}
		mt.setBits(sVlanTCI, uint64(v[0]&7)<<13, vlanPCPMask)
		return nil
	case oxmHdr{clsOXM, 21}:
		if err := want(2); err != nil {
			return err
		}
		mt.setUint(sNwProto, beUint(v)&0xff)
		return nil
	case oxmHdr{clsOXM, 8}:
		if err := want(1); err != nil {
			return err
		}
		mt.setBits(sNwTos, uint64(v[0])<<2, 0xfc)
		return nil
	case oxmHdr{clsOXM, 9}:
		if err := want(1); err != nil {
			return err
		}
		mt.setBits(sNwTos, uint64(v[0]&3), 0x03)
		return nil
	case oxmHdr{clsNXM1, 26}:
		if err := want(1); err != nil {
			return err
		}
		mt.set(sNwFrag, []byte{v[0] & 3}, []byte{m[0] & 3})
		return nil
	case oxmHdr{clsOXM, 19}, oxmHdr{clsOXM, 29}:
		if err := want(1); err != nil {
			return err
		}
		mt.setUint(sTpSrc, uint64(v[0]))
		return nil
	case oxmHdr{clsOXM, 20}, oxmHdr{clsOXM, 30}:
		if err := want(1); err != nil {
			return err
		}
		mt.setUint(sTpDst, uint64(v[0]))
		return nil
	case oxmHdr{clsOXM, 10}:
		return setSlot(sNwProto)
	}
	if h.class == clsPktRg && h.field < 8 {
		if err := want(8); err != nil {
			return err
		}
		i := int(h.field)
		mt.set(sReg0+slot(2*i), v[:4], m[:4])
		mt.set(sReg0+slot(2*i+1), v[4:], m[4:])
		return nil
	}
	if h.class == clsNXM1 && h.field < 16 {
		return setSlot(sReg0 + slot(h.field))
	}
	if f, ok := fieldByHdr[h]; ok && !f.special {
		return setSlot(f.slot)
	}
	return fmt.Errorf("unsupported match field %#04x:%d", h.class, h.field)
}
