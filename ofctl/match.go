package ofctl

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
