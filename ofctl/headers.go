package ofctl

import (
	"encoding/binary"
	"fmt"
)

// This file holds OXM and NXM headers beyond the 4-byte basic ones:
// experimenter classes and the field ids of the actions that name a field
// by header (copy_field, push, pop, output).

// Experimenter OXM classes. On the wire they are class 0xffff followed by
// the experimenter id of experimenterIDs; inside the package they get a
// class above 0xffff so that a header names one field and wire classes can
// never be mistaken for them.
const (
	clsExpTun = 0x1_0000 // NXOXM_ET: ERSPAN and GTP-U tunnel fields
	clsExpNSH = 0x1_0001 // NXOXM_NSH: Network Service Header fields
	clsExpONF = 0x1_0002 // ONFOXM_ET: actset_output's header in Nicira actions
)

var experimenterIDs = map[uint32]uint32{
	clsExpTun: 0x00002320, // Nicira
	clsExpNSH: 0x005ad650, // Nicira's NSH experimenter id
	clsExpONF: 0x4f4e4600, // ONF
}

// isExperimenter reports whether h is an experimenter OXM.
func (h oxmHdr) isExperimenter() bool { return h.class > 0xffff }

// experimenterClass maps an experimenter id from the wire to its class.
func experimenterClass(id uint32) (uint32, bool) {
	for c, e := range experimenterIDs {
		if e == id {
			return c, true
		}
	}
	return 0, false
}

// pullExperimenter reads the experimenter id at the start of an OXM body
// with wire class 0xffff and returns the package's class for it and the
// rest of the body.
func pullExperimenter(field uint8, body []byte) (oxmHdr, []byte, error) {
	if len(body) < 4 {
		return oxmHdr{}, nil, fmt.Errorf("truncated experimenter match field %d", field)
	}
	id := binary.BigEndian.Uint32(body)
	c, ok := experimenterClass(id)
	if !ok {
		return oxmHdr{}, nil, fmt.Errorf("unsupported experimenter match field %d of experimenter %#08x", field, id)
	}
	return oxmHdr{c, field}, body[4:], nil
}

// oxmID is the header naming f in copy_field: 4 bytes, or 8 for an
// experimenter field. A tun_metadata field is named with its full 124 bytes
// by ovs-ofctl and with its option length by vswitchd, which keeps the
// bridge's TLV map (tlv, when known).
func oxmID(f *field, tlv TLVMap) []byte {
	if f.hdr.isExperimenter() {
		return experimenterID(f.hdr, f.bytes)
	}
	h := hdr32(f)
	if l, ok := tlv[int(f.hdr.field)-tunMDFirstNX]; ok && f.variable {
		h = h&^0xff | uint32(l)
	}
	return binary.BigEndian.AppendUint32(nil, h)
}

// nxmID is oxmID for the Nicira actions that name fields by their NXM
// header (push, pop): the NXM header where a field has one.
func nxmID(f *field, tlv TLVMap) []byte {
	if f.nxmHdr.isExperimenter() {
		return experimenterID(f.nxmHdr, f.bytes)
	}
	if f.hdr.isExperimenter() || f.variable {
		return oxmID(f, tlv)
	}
	return binary.BigEndian.AppendUint32(nil, nxmHdr32(f))
}

// pullNXMID reads a header written by nxmID.
func pullNXMID(b []byte) (*field, int, error) {
	if len(b) >= 4 && binary.BigEndian.Uint16(b) != 0xffff {
		h := binary.BigEndian.Uint32(b)
		if f, ok := fieldByNXMHdr[oxmHdr{h >> 16, uint8(h>>9) & 0x7f}]; !ok || !f.variable {
			f, err := fieldFromNXMHeader(h)
			return f, 4, err
		}
	}
	return pullOXMID(b)
}

// experimenterID is the 8-byte header of an experimenter field with an
// n-byte value.
func experimenterID(h oxmHdr, n int) []byte {
	b := []byte{0xff, 0xff, h.field << 1, byte(n + 4)}
	return binary.BigEndian.AppendUint32(b, experimenterIDs[h.class])
}

// pullOXMID reads a header written by oxmID and returns its field and
// size.
func pullOXMID(b []byte) (*field, int, error) {
	if len(b) < 4 {
		return nil, 0, fmt.Errorf("truncated field header")
	}
	h := binary.BigEndian.Uint32(b)
	if h>>16 != 0xffff {
		if f, ok := fieldByHdr[oxmHdr{h >> 16, uint8(h>>9) & 0x7f}]; ok && f.variable && int(h&0xff) <= tunMDBytes && h&0x100 == 0 {
			return f, 4, nil
		}
		f, err := fieldFromHeader(h)
		return f, 4, err
	}
	if len(b) < 8 {
		return nil, 0, fmt.Errorf("truncated experimenter field header")
	}
	hdr, _, err := pullExperimenter(uint8(h>>9)&0x7f, b[4:8])
	if err != nil {
		return nil, 0, err
	}
	f, ok := fieldByHdr[hdr]
	if !ok {
		f, ok = fieldByNXMHdr[hdr]
	}
	if !ok || int(h&0xff) != f.bytes+4 || h&0x100 != 0 {
		return nil, 0, fmt.Errorf("unsupported field header %#08x", h)
	}
	return f, 8, nil
}

// nxmHdr32 is the 4-byte NXM header learn uses for f.
func nxmHdr32(f *field) uint32 {
	return uint32(f.nxmHdr.class)<<16 | uint32(f.nxmHdr.field)<<9 | uint32(f.bytes)
}

// nxmHdrOf is nxmHdr32 as the bridge keeps it: a tun_metadata field with
// the option length of the TLV map, when the parser has one.
func (cx *actx) nxmHdrOf(f *field) uint32 {
	return binary.BigEndian.Uint32(nxmID(f, cx.mt.tlv))
}

// nxmSubfield decodes the NXM header and ofs_nbits of a Nicira action's
// destination.
func nxmSubfield(h uint32, ofsNbits uint16) (subfield, error) {
	f, err := fieldFromNXMHeader(h)
	if err != nil {
		return subfield{}, err
	}
	return decodeOfsNbits(f, ofsNbits)
}

// fieldFromNXMHeader finds the field learn names by an NXM header.
func fieldFromNXMHeader(h uint32) (*field, error) {
	f, ok := fieldByNXMHdr[oxmHdr{h >> 16, uint8(h>>9) & 0x7f}]
	if ok && f.variable && int(h&0xff) <= f.bytes && h&0x100 == 0 {
		return f, nil // as wide as the bridge's option, or 124 bytes
	}
	if !ok || int(h&0xff) != f.bytes || h&0x100 != 0 {
		return nil, fmt.Errorf("unsupported field header %#08x", h)
	}
	return f, nil
}
