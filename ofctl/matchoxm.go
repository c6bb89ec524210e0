// The match as OXM/NXM bytes: encoded in the order OVS's nx_put_raw emits
// them, and decoded back into a match.

package ofctl

import (
	"encoding/binary"
	"fmt"
)

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
