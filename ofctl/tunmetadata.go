package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Geneve options (tun_metadata0 to tun_metadata63) are variable-length
// fields. Without a TLV map, as ovs-ofctl has one, a value is as wide as
// its significant bytes (OVS's mf_field_len): tun_metadata0=0x1 is one
// byte. vswitchd stores a match at the option length the bridge's TLV map
// gives the field (`ovs-ofctl add-tlv-map`), so a match encodes to the
// bytes the switch dumps only when the parser knows that map (ParseFlowTLV).
// Actions (set_field, load) keep their own width on the switch.
const (
	tunMDFields  = 64
	tunMDBytes   = 124 // the widest option OVS supports
	tunMDTotal   = 256 // TUN_METADATA_TOT_OPT_SIZE: all options of a match
	tunMDFirstNX = 40  // NXM_NX_TUN_METADATA0 is NXM1 field 40
	nxastDelete  = 50  // NXAST_DELETE_FIELD
)

// TLVMap gives, for each tun_metadataN a bridge maps (by N), the length in
// bytes of the Geneve option: what `ovs-ofctl add-tlv-map` set and
// `dump-tlv-map` shows.
type TLVMap map[int]int

// ParseTLVMap reads the mappings of `ovs-ofctl add-tlv-map`, e.g.
// "{class=0xffff,type=0,len=4}->tun_metadata0,{class=0xffff,type=1,len=8}->tun_metadata1".
// Only the lengths matter for encoding flows.
func ParseTLVMap(s string) (TLVMap, error) {
	m := TLVMap{}
	for off := 0; off < len(s); {
		for off < len(s) && (s[off] == ',' || s[off] == ' ') {
			off++
		}
		if off == len(s) {
			break
		}
		end := strings.IndexByte(s[off:], '}')
		if s[off] != '{' || end < 0 || !strings.HasPrefix(s[off+end+1:], "->tun_metadata") {
			return nil, &SyntaxError{Col: off + 1, Token: s[off:], Msg: "want {class=C,type=T,len=L}->tun_metadataN"}
		}
		body := s[off+1 : off+end]
		rest := s[off+end+1+len("->tun_metadata"):]
		digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		n, err := strconv.Atoi(rest[:digits])
		if err != nil || n >= tunMDFields {
			return nil, &SyntaxError{Col: off + end + 2, Token: s[off+end+1:], Msg: "bad tun_metadata field (want tun_metadata0 to tun_metadata63)"}
		}
		length := -1
		for _, kvText := range strings.Split(body, ",") {
			k, v, _ := strings.Cut(kvText, "=")
			if strings.TrimSpace(k) == "len" {
				l, err := parseUint(strings.TrimSpace(v), 8)
				if err != nil || l%4 != 0 || l > tunMDBytes {
					return nil, &SyntaxError{Col: off + 1, Token: body, Msg: "bad option length (want a multiple of 4 up to 124)"}
				}
				length = int(l)
			}
		}
		if length < 0 {
			return nil, &SyntaxError{Col: off + 1, Token: body, Msg: "mapping without len"}
		}
		m[n] = length
		off += end + 1 + len("->tun_metadata") + digits
	}
	return m, nil
}

// mdMatch is a match on one tun_metadata field as OVS's parser keeps it
// without a TLV map: value and mask as wide as their significant bytes.
type mdMatch struct {
	v, m   []byte // m has the width of v; nil m: exact
	masked bool   // masked in OVS's terms (a mask was given, or none: presence)
}

// sigBytes returns the significant bytes of b (without leading zeros).
func sigBytes(b []byte) []byte {
	i := 0
	for i < len(b) && b[i] == 0 {
		i++
	}
	return b[i:]
}

// rightAlign returns b as an n-byte big-endian value.
func rightAlign(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out[n-len(b):], b)
	return out
}

// tunMDWidth returns the width OVS gives a value and mask without a TLV
// map, and whether it counts as masked (a mask not all ones over the
// field's 124 bytes).
func tunMDWidth(v, m []byte) (int, bool) {
	masked := m != nil && !isOnes(m)
	w := len(sigBytes(v))
	if masked && len(sigBytes(m)) > w {
		w = len(sigBytes(m))
	}
	return w, masked
}

// setTunMetadata stores a match on tun_metadataN (presence when p has no
// value), refusing what OVS would print as a different match.
func (mt *match) setTunMetadata(f *field, p kv) error {
	idx := int(f.hdr.field) - tunMDFirstNX
	if _, dup := mt.md[idx]; dup {
		return errAt(p.keyOff, p.text(), "field %s set multiple times", f.name)
	}
	e := mdMatch{masked: true}
	if p.delim != 0 {
		v, m, err := parseFieldValue(f, p.val)
		if err != nil {
			return errAt(p.valOff, p.val, "%v", err)
		}
		// OVS sizes the field by the value as written, before masking.
		vs, _, _ := splitMask(p.val)
		raw, _, err := parseFieldValue(f, vs)
		if err != nil {
			return errAt(p.valOff, p.val, "%v", err)
		}
		w, masked := tunMDWidth(raw, m)
		e = mdMatch{v: v[tunMDBytes-w:], masked: masked}
		if masked {
			e.m = m[tunMDBytes-w:]
			_, mapped := mt.tlv[idx]
			switch shown, _ := tunMDWidth(v, m); {
			case shown < w && !mapped: // a TLV map fixes the width whatever the text
				return errAt(p.valOff, p.val, "the value has bits outside the mask that widen the field to %d bytes: OVS would print the match as %s=%s/%s, which reads back as a %d-byte field", w, f.name, formatHex(v[tunMDBytes-shown:]), formatHex(m[tunMDBytes-shown:]), shown)
			case w > 0 && isOnes(e.m):
				return errAt(p.valOff, p.val, "a mask of all ones over the value's %d bytes is not supported: OVS would print the match as %s=%s, which reads back as an exact match", w, f.name, formatHex(e.v))
			case w > 0 && isZero(e.m):
				return errAt(p.valOff, p.val, "a zero mask is not supported: OVS would print the match as %s alone, which reads back as a match on the option's presence", f.name)
			}
		}
	}
	used := 0
	for _, o := range mt.md {
		used += len(o.v)
	}
	if used+len(e.v) > tunMDTotal {
		return errAt(p.keyOff, p.text(), "field %s exceeds maximum size for tunnel metadata (used %d, max %d)", f.name, used+len(e.v), tunMDTotal)
	}
	if mt.md == nil {
		mt.md = map[int]mdMatch{}
	}
	mt.md[idx] = e
	return nil
}

// encodeTunMetadata appends the tun_metadata matches in field order, at
// the TLV map's option lengths when the match has a map.
func (mt *match) encodeTunMetadata(ol *oxmList) {
	if len(mt.md) == 0 {
		return
	}
	idxs := make([]int, 0, len(mt.md))
	for i := range mt.md {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		e := mt.md[i]
		h := oxmHdr{clsNXM1, uint8(tunMDFirstNX + i)}
		if l, ok := mt.tlv[i]; ok && mt.tlv != nil {
			// vswitchd's form: the option's width, unmasked when the mask
			// covers all of it; presence is a zero value under a zero mask.
			v := rightAlign(e.v, l)
			m := ones(l)
			if e.masked {
				m = rightAlign(e.m, l)
			}
			if l > 0 && isOnes(m) {
				ol.add(h, v, nil)
			} else {
				ol.add(h, v, m)
			}
			continue
		}
		if e.masked {
			m := e.m
			if m == nil {
				m = []byte{}
			}
			ol.add(h, e.v, m)
		} else {
			ol.add(h, e.v, nil)
		}
	}
}

// checkTLV refuses tun_metadata matches the bridge's TLV map cannot hold.
func (mt *match) checkTLV(set []setting) error {
	if mt.tlv == nil {
		return nil
	}
	for _, st := range set {
		if !st.f.variable {
			continue
		}
		i := int(st.f.hdr.field) - tunMDFirstNX
		l, ok := mt.tlv[i]
		switch e := mt.md[i]; {
		case !ok:
			return errAt(st.p.keyOff, st.p.text(), "%s is not in the bridge's TLV map: vswitchd would refuse the flow (NXFMFC_INVALID_TLV_FIELD)", st.f.name)
		case len(e.v) > l:
			return errAt(st.p.keyOff, st.p.text(), "%s is %d bytes wide in the TLV map; the value needs %d", st.f.name, l, len(e.v))
		}
	}
	return nil
}

// decodeTunMetadata reads a tun_metadata match from the wire as ovs-ofctl
// does without a TLV map: as wide as the significant bytes of value and
// mask, masked whenever the wire entry is.
func (mt *match) decodeTunMetadata(idx int, v, m []byte, wireMasked bool) {
	if mt.md == nil {
		mt.md = map[int]mdMatch{}
	}
	if !wireMasked {
		mt.md[idx] = mdMatch{v: append([]byte{}, sigBytes(v)...)}
		return
	}
	w := len(sigBytes(andBytes(v, m)))
	if n := len(sigBytes(m)); n > w {
		w = n
	}
	mt.md[idx] = mdMatch{v: rightAlign(sigBytes(andBytes(v, m)), w), m: rightAlign(sigBytes(m), w), masked: true}
}

// formatTunMetadata prints the tun_metadata matches as OVS's
// tun_metadata_match_format does.
func (mt *match) formatTunMetadata(w *matchWriter) {
	idxs := make([]int, 0, len(mt.md))
	for i := range mt.md {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		e, name := mt.md[i], "tun_metadata"+itoa(i)
		switch {
		case e.masked && isZero(e.m):
			w.add(name, "")
		case e.masked && !isOnes(e.m):
			w.add(name, formatHex(e.v)+"/"+formatHex(e.m))
		default:
			w.add(name, formatHex(e.v))
		}
	}
}

// tunMDSetField encodes set_field (or load) to a tun_metadata field as OVS
// does: as wide as the value (and mask), masked when a mask was given.
func tunMDSetField(f *field, v, m []byte) []byte {
	w, masked := tunMDWidth(v, m)
	b := []byte{0, ofpatSetField, 0, 0}
	n := w
	if masked {
		n *= 2
	}
	b = appendOXMHeader(b, f.hdr, masked, n)
	b = append(b, v[len(v)-w:]...)
	if masked {
		b = append(b, m[len(m)-w:]...)
	}
	return setLen16(pad8(b))
}

// checkMapped refuses an action on a tun_metadata field the bridge's TLV
// map (when known) lacks.
func (cx *actx) checkMapped(f *field, off int, tok string) error {
	if _, ok := cx.mt.tlv[int(f.hdr.field)-tunMDFirstNX]; cx.mt.tlv != nil && !ok {
		return errAt(off, tok, "%s is not in the bridge's TLV map: vswitchd would refuse the flow (NXFMFC_INVALID_TLV_FIELD)", f.name)
	}
	return nil
}

// parseDeleteField parses delete_field:tun_metadataN.
func (cx *actx) parseDeleteField(p kv) ([]byte, error) {
	f := lookupField(p.val)
	if f == nil || !f.variable {
		return nil, errAt(p.valOff, p.val, "delete_field takes a tun_metadata field (tun_metadata0 to tun_metadata63)")
	}
	if err := cx.checkMapped(f, p.valOff, p.val); err != nil {
		return nil, err
	}
	// ovs-ofctl names the field with its full 124-byte header; vswitchd
	// keeps the option length of its TLV map there instead.
	h := hdr32(f)
	if l, ok := cx.mt.tlv[int(f.hdr.field)-tunMDFirstNX]; ok {
		h = h&^0xff | uint32(l)
	}
	b := nxHeader(nxastDelete)
	b = binary.BigEndian.AppendUint32(b, h)
	return setLen16(append(b, make([]byte, 10)...)), nil
}

func formatDeleteField(a []byte) (string, error) {
	if len(a) != 24 {
		return "", errors.New("bad delete_field length")
	}
	h := binary.BigEndian.Uint32(a[10:])
	f, ok := fieldByHdr[oxmHdr{h >> 16, uint8(h>>9) & 0x7f}]
	if !ok || !f.variable || int(h&0xff) > tunMDBytes || h&0x100 != 0 {
		return "", fmt.Errorf("delete_field: unsupported field header %#08x", h)
	}
	return "delete_field:" + f.name, nil
}
