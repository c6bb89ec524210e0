// The register actions: subfields (NXM_OF_IN_PORT[0..15]), set_field, load,
// move and mod_* actions, parsed and printed.

package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// subfield is a bit range of a field, as in NXM_NX_REG0[0..15].
type subfield struct {
	f         *field
	ofs, bits int
}

// actionField maps the match-only names tp_src and tp_dst to the fields
// OVS means by them in actions: tcp_src and tcp_dst.
func actionField(f *field) *field {
	switch f.name {
	case "tp_src":
		return fieldByName["tcp_src"]
	case "tp_dst":
		return fieldByName["tcp_dst"]
	}
	return f
}

// parseSubfield parses NAME, NAME[], NAME[N] or NAME[A..B] for the
// actions that name a field by a 32-bit NXM header (learn, multipath,
// bundle_load, ...), which experimenter fields do not have.
func parseSubfield(s string) (subfield, error) {
	sf, err := parseSubfieldAny(s)
	if err == nil && (sf.f.hdr.isExperimenter() || sf.f.nxmHdr.isExperimenter()) {
		return subfield{}, fmt.Errorf("field %s cannot be used here: only set_field, load, move, push, pop and output take experimenter fields", sf.f.name)
	}
	return sf, err
}

// parseSubfieldAny is parseSubfield for any field, experimenter ones
// included: load (sent as set_field), move, push, pop and output, which OVS
// encodes with 8-byte headers for them.
func parseSubfieldAny(s string) (subfield, error) {
	name, rng, hasRng := strings.Cut(s, "[")
	f := lookupField(name)
	if f == nil {
		return subfield{}, fmt.Errorf("unknown field %q", name)
	}
	if !hasRng {
		return subfield{f: actionField(f), bits: actionField(f).bits}, nil
	}
	return bitRange(actionField(f), s, rng)
}

// bitRange reads the "A..B]" (or "N]", or "]") after FIELD[ in s.
func bitRange(f *field, s, rng string) (subfield, error) {
	sf := subfield{f: f, ofs: 0, bits: f.bits}
	if !strings.HasSuffix(rng, "]") {
		return subfield{}, fmt.Errorf("missing ']' in %q", s)
	}
	rng = strings.TrimSuffix(rng, "]")
	if rng == "" {
		return sf, nil
	}
	lo, hi, isRange := strings.Cut(rng, "..")
	a, err := strconv.Atoi(lo)
	if err != nil || a < 0 {
		return subfield{}, fmt.Errorf("bad bit range %q", s)
	}
	b := a
	if isRange {
		if b, err = strconv.Atoi(hi); err != nil || b < a {
			return subfield{}, fmt.Errorf("bad bit range %q", s)
		}
	}
	if b >= f.bits {
		return subfield{}, fmt.Errorf("bit range %q exceeds the %d bits of %s", s, f.bits, f.name)
	}
	sf.ofs, sf.bits = a, b-a+1
	return sf, nil
}

// String prints the sub-field as OVS's mf_format_subfield does.
func (sf subfield) String() string {
	name := sf.f.nxm
	if name == "" {
		name = sf.f.name
	}
	switch {
	case sf.ofs == 0 && sf.bits == sf.f.bits:
		return name + "[]"
	case sf.bits == 1:
		return name + "[" + strconv.Itoa(sf.ofs) + "]"
	default:
		return name + "[" + strconv.Itoa(sf.ofs) + ".." + strconv.Itoa(sf.ofs+sf.bits-1) + "]"
	}
}

// hdr32 is the 4-byte NXM/OXM header naming f (no mask), as used by
// copy_field, output_reg and ct zone.
func hdr32(f *field) uint32 {
	return uint32(f.hdr.class)<<16 | uint32(f.hdr.field)<<9 | uint32(f.bytes)
}

// ofsNbits packs a bit range the way Nicira actions do.
func ofsNbits(ofs, bits int) uint16 { return uint16(ofs<<6 | (bits - 1)) }

// fieldCheck verifies that f may be written in this context.
func (cx *actx) checkWritable(f *field, off int, tok string) error {
	if !f.writable {
		return errAt(off, tok, "field %s is not writable", f.name)
	}
	isCT := f.name == "ct_mark" || f.name == "ct_label"
	if cx.outer == "ct" && !isCT {
		return errAt(off, tok, "only ct_mark and ct_label may be set inside ct(exec(...))")
	}
	if cx.outer != "ct" && isCT {
		return errAt(off, tok, "%s may only be set inside ct(commit,exec(...))", f.name)
	}
	if !cx.ok(f.pre) {
		return errAt(off, tok, "setting %s requires %s in the match", f.name, prereqText(f.pre))
	}
	if f.name == "vlan_vid" || f.name == "vlan_pcp" {
		if !cx.ok(preVLAN) {
			return errAt(off, tok, "setting %s requires a VLAN header (match vlan_tci=0x1000/0x1000 or push_vlan first)", f.name)
		}
	}
	return nil
}

// setFieldAction encodes OFPAT_SET_FIELD; mask nil or all ones means
// unmasked.
func setFieldAction(f *field, v, m []byte) []byte {
	masked := m != nil && !isOnes(m)
	n := len(v)
	if masked {
		n *= 2
	}
	hl := 4
	if f.hdr.isExperimenter() {
		hl = 8
	}
	// Allocated once at its padded size.
	b := append(make([]byte, 0, (4+hl+n+7)&^7), 0, ofpatSetField, 0, 0)
	b = appendOXMHeader(b, f.hdr, masked, n)
	b = append(b, v...)
	if masked {
		b = append(b, m...)
	}
	return setLen16(pad8(b))
}

func (cx *actx) parseSetField(p kv) ([]byte, error) {
	vs, fs, ok := strings.Cut(p.val, "->")
	if !ok {
		return nil, errAt(p.valOff, p.val, "set_field needs VALUE->FIELD")
	}
	fOff := p.valOff + len(vs) + 2
	f := fieldByName[fs]
	if f == nil {
		f = fieldByNXM[fs]
	}
	if f == nil {
		return nil, errAt(fOff, fs, "unknown field")
	}
	f = actionField(f)
	if err := cx.checkWritable(f, fOff, fs); err != nil {
		return nil, err
	}
	v, m, err := parseFieldValueMask(f, vs, true)
	if err != nil {
		return nil, errAt(p.valOff, vs, "%v", err)
	}
	if val, _, hasMask := splitMask(vs); hasMask {
		if raw, _, err := parseFieldValueMask(f, val, true); err == nil && string(raw) != string(v) {
			return nil, errAt(p.valOff, vs, "value has bits set outside the mask")
		}
	}
	if f.variable {
		if err := cx.checkMapped(f, fOff, fs); err != nil {
			return nil, err
		}
		_, _, hasMask := splitMask(vs)
		if !hasMask {
			m = ones(len(v))
		}
		return tunMDSetField(f, v, m), nil
	}
	return setFieldAction(f, v, m), nil
}

func (cx *actx) parseLoad(p kv) ([]byte, error) {
	vs, ds, ok := strings.Cut(p.val, "->")
	if !ok {
		return nil, errAt(p.valOff, p.val, "load needs VALUE->FIELD[]")
	}
	dOff := p.valOff + len(vs) + 2
	sf, err := parseSubfieldAny(ds)
	if err != nil {
		return nil, errAt(dOff, ds, "%v", err)
	}
	if err := cx.checkWritable(sf.f, dOff, ds); err != nil {
		return nil, err
	}
	raw, err := parseUintBytes(vs, sf.f.bytes, sf.bits)
	if err != nil {
		return nil, errAt(p.valOff, vs, "%v (destination is %d bits)", err, sf.bits)
	}
	// Shift the value into place and build the mask of the sub-field.
	v := shiftLeft(raw, sf.ofs)
	m := shiftLeft(bitMask(sf.f.bytes, sf.bits), sf.ofs)
	if sf.f.variable {
		if err := cx.checkMapped(sf.f, dOff, ds); err != nil {
			return nil, err
		}
		return tunMDSetField(sf.f, v, m), nil
	}
	return setFieldAction(sf.f, v, m), nil
}

// shiftLeft shifts a big-endian byte string left by n bits.
func shiftLeft(b []byte, n int) []byte {
	out := make([]byte, len(b))
	for i := 0; i < len(b)*8; i++ {
		if b[len(b)-1-i/8]&(1<<(i%8)) == 0 {
			continue
		}
		j := i + n
		if j < len(b)*8 {
			out[len(b)-1-j/8] |= 1 << (j % 8)
		}
	}
	return out
}

func (cx *actx) parseMove(p kv) ([]byte, error) {
	ss, ds, ok := strings.Cut(p.val, "->")
	if !ok {
		return nil, errAt(p.valOff, p.val, "move needs SRC[]->DST[]")
	}
	dOff := p.valOff + len(ss) + 2
	src, err := parseSubfieldAny(ss)
	if err != nil {
		return nil, errAt(p.valOff, ss, "%v", err)
	}
	dst, err := parseSubfieldAny(ds)
	if err != nil {
		return nil, errAt(dOff, ds, "%v", err)
	}
	if src.bits != dst.bits {
		return nil, errAt(p.valOff, p.val, "source field is %d bits wide but destination is %d bits wide", src.bits, dst.bits)
	}
	if !cx.ok(src.f.pre) {
		return nil, errAt(p.valOff, ss, "reading %s requires %s in the match", src.f.name, prereqText(src.f.pre))
	}
	if src.f.hdr == (oxmHdr{}) && src.f.name != "in_port" {
		return nil, errAt(p.valOff, ss, "field %s cannot be used in move", src.f.name)
	}
	if err := cx.checkWritable(dst.f, dOff, ds); err != nil && !(dst.f.name == "vlan_vid" && dst.f.writable) {
		return nil, err
	}
	b := []byte{0, ofpatCopyField, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(src.bits))
	b = binary.BigEndian.AppendUint16(b, uint16(src.ofs))
	b = binary.BigEndian.AppendUint16(b, uint16(dst.ofs))
	b = append(b, 0, 0)
	b = append(b, oxmID(src.f, cx.mt.tlv)...)
	b = append(b, oxmID(dst.f, cx.mt.tlv)...)
	return setLen16(pad8(b)), nil
}

// parseModAction handles the old mod_* actions, which OVS sends as
// set_field in OpenFlow 1.5.
func (cx *actx) parseModAction(p kv, key string) ([]byte, error) {
	if p.delim == 0 || p.val == "" {
		return nil, errAt(p.keyOff, p.text(), "%s needs a value", key)
	}
	name := map[string]string{
		"mod_dl_src": "eth_src", "mod_dl_dst": "eth_dst", "mod_nw_src": "ip_src", "mod_nw_dst": "ip_dst",
		"mod_nw_ecn": "nw_ecn",
	}[key]
	if key == "mod_tp_src" || key == "mod_tp_dst" {
		proto, _ := cx.mt.proto()
		pfx := map[uint8]string{protoTCP: "tcp", protoUDP: "udp", protoSCTP: "sctp"}[proto]
		if pfx == "" {
			return nil, errAt(p.keyOff, p.text(), "%s requires tcp, udp or sctp in the match", key)
		}
		name = pfx + key[6:]
	}
	return cx.asSetField(p, p.val+"->"+name)
}

// asSetField parses an old-style action as the set_field it stands for;
// errors about the synthetic field name point at the action instead.
func (cx *actx) asSetField(p kv, val string) ([]byte, error) {
	b, err := cx.parseSetField(kv{key: "set_field", keyOff: p.keyOff, delim: ':', val: val, valOff: p.valOff})
	var se *SyntaxError
	if errors.As(err, &se) && se.Col-1 >= p.valOff+len(p.val) {
		se.Col, se.Token = p.keyOff+1, p.text()
	}
	return b, err
}

// fieldFromHeader finds the field named by a 4-byte NXM/OXM header.
func fieldFromHeader(h uint32) (*field, error) {
	hdr := oxmHdr{h >> 16, uint8(h>>9) & 0x7f}
	f, ok := fieldByHdr[hdr]
	if !ok || int(h&0xff) != f.bytes {
		return nil, fmt.Errorf("unsupported field header %#08x", h)
	}
	return f, nil
}

func formatSetField(a []byte) (string, error) {
	if len(a) < 8 {
		return "", errors.New("bad set_field length")
	}
	h := binary.BigEndian.Uint32(a[4:])
	masked := h&0x100 != 0
	hdr, body := oxmHdr{h >> 16, uint8(h>>9) & 0x7f}, a[8:]
	n := int(h & 0xff)
	if n > len(body) {
		return "", fmt.Errorf("set_field: truncated field %#08x", h)
	}
	body = body[:n]
	if hdr.class == 0xffff {
		var err error
		if hdr, body, err = pullExperimenter(hdr.field, body); err != nil {
			return "", fmt.Errorf("set_field: %w", err)
		}
	}
	f, ok := fieldByHdr[hdr]
	n = len(body)
	if masked {
		n /= 2
	}
	if !ok || n != f.bytes && !(f.variable && n <= f.bytes) {
		return "", fmt.Errorf("set_field: unsupported field header %#08x", h)
	}
	v := body[:n]
	var m []byte
	if masked {
		m = body[n : 2*n]
	}
	if f.variable && masked {
		// OVS's mask is 124 bytes wide: it prints even one of all ones.
		return "set_field:" + formatHex(v) + "/" + formatHex(m) + "->" + f.name, nil
	}
	return "set_field:" + formatValue(f, v, m) + "->" + f.name, nil
}

// formatValue prints a field value (and mask, if not nil) as OVS's
// mf_format does.
func formatValue(f *field, v, m []byte) string {
	if m != nil && isOnes(m) {
		m = nil
	}
	switch f.kind {
	case kEth:
		if m == nil {
			return formatEth(v)
		}
		return formatEthMasked(v, m)
	case kIPv4, kIPv6:
		if m == nil {
			m = ones(len(v))
		}
		return formatIPMasked(v, m)
	case kPort:
		if len(v) == 4 {
			return formatPort11(binary.BigEndian.Uint32(v))
		}
		return formatPort(binary.BigEndian.Uint16(v))
	case kDec:
		s := strconv.FormatUint(beUint(v), 10)
		if m != nil {
			s += "/" + formatHex(m)
		}
		return s
	case kPacketType:
		// mf_format names the field in the value, as learn then shows.
		return "packet_type=" + formatPacketType(uint32(beUint(v)))
	case kCtState, kTCPFlags, kTunFlags:
		// A masked value prints as +flag-flag so it parses back masked
		// (OVS prints it like an unmasked one).
		names := map[valKind][]string{kCtState: ctStateFlags, kTCPFlags: tcpFlagNames, kTunFlags: tunFlagNames}[f.kind]
		if m == nil {
			return formatFlags(beUint(v), names, "|")
		}
		return formatFlagsMasked(beUint(v), beUint(m), names)
	}
	s := formatHex(v)
	if m != nil {
		s += "/" + formatHex(m)
	}
	return s
}

func formatCopyField(a []byte) (string, error) {
	if len(a) < 20 {
		return "", errors.New("bad copy_field length")
	}
	bits := int(binary.BigEndian.Uint16(a[4:]))
	srcOfs := int(binary.BigEndian.Uint16(a[6:]))
	dstOfs := int(binary.BigEndian.Uint16(a[8:]))
	src, n, err := pullOXMID(a[12:])
	if err != nil {
		return "", fmt.Errorf("move: %w", err)
	}
	dst, _, err := pullOXMID(a[12+n:])
	if err != nil {
		return "", fmt.Errorf("move: %w", err)
	}
	if bits == 0 || srcOfs+bits > src.bits || dstOfs+bits > dst.bits {
		return "", errors.New("move: bad bit range")
	}
	return "move:" + subfield{src, srcOfs, bits}.String() + "->" + subfield{dst, dstOfs, bits}.String(), nil
}

// decodeOfsNbits unpacks a Nicira ofs_nbits value against field f.
func decodeOfsNbits(f *field, v uint16) (subfield, error) {
	ofs, bits := int(v>>6), int(v&0x3f)+1
	if ofs+bits > f.bits {
		return subfield{}, fmt.Errorf("bit range exceeds %s", f.name)
	}
	return subfield{f, ofs, bits}, nil
}
