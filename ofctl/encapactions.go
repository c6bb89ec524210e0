package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// OpenFlow 1.5 MPLS action types and the Nicira encapsulation subtypes.
const (
	ofpatSetMplsTTL = 15
	ofpatDecMplsTTL = 16
	ofpatPushMpls   = 19
	ofpatPopMpls    = 20

	nxastEncap     = 46
	nxastDecap     = 47
	nxastDecNshTTL = 48
)

// Encap property classes and types (OFPPPC_NSH, OFPPPT_PROP_NSH_*).
const (
	edClassNSH   = 4
	edNSHMdType  = 1
	edNSHTLV     = 2
	ofphtnNTypes = 5 // packet type namespaces OVS knows (OFPHTN_N_TYPES)
)

// encapHeaders are the headers encap(...) adds, by ovs-ofctl name.
var encapHeaders = []struct {
	name string
	pt   uint32
}{{"ethernet", ptEth}, {"nsh", ptNSH}, {"mpls", ptMPLS}, {"mpls_mc", ptMPLSMC}}

// packetType returns the packet type the actions so far leave (0, the
// Ethernet default, when the match says nothing).
func (cx *actx) packetType() uint32 { return uint32(cx.mt.u(sPacketType)) }

// setPacketType records what an action leaves the packet as, for the
// checks of the actions that follow (OVS's check_ENCAP and check_DECAP).
func (cx *actx) setPacketType(pt uint32) {
	cx.mt.setUint(sPacketType, uint64(pt))
	if pt>>16 == ptNsEther {
		cx.mt.setUint(sDlType, uint64(pt&0xffff))
	}
}

// parseMplsAction parses push_mpls, pop_mpls, set_mpls_label, set_mpls_tc,
// set_mpls_ttl and dec_mpls_ttl with OVS's checks against the flow; ok is
// false for other keys.
func (cx *actx) parseMplsAction(p kv, key string) (b []byte, ok bool, err error) {
	isMPLS := func() bool { t, ok := cx.mt.dlType(); return ok && (t == ethMPLS || t == ethMPLM) }
	needMPLS := func() error {
		if !cx.consistent(preMPLS) && !isMPLS() {
			return errAt(p.keyOff, p.text(), "%s requires an MPLS packet (match mpls or mplsm, or push_mpls first)", key)
		}
		return nil
	}
	switch key {
	case "push_mpls", "pop_mpls":
		v, perr := parseUint(p.val, 16)
		if perr != nil {
			return nil, true, errAt(p.valOff, p.val, "bad Ethernet type (want 0 to 0xffff)")
		}
		typ := uint8(ofpatPushMpls)
		if key == "push_mpls" {
			if v != ethMPLS && v != ethMPLM {
				return nil, true, errAt(p.valOff, p.val, "not a valid MPLS ethertype (want 0x8847 or 0x8848; vswitchd refuses others with OFPBAC_BAD_ARGUMENT)")
			}
			if cx.outer != "write_actions" && cx.packetType() != ptEth {
				return nil, true, errAt(p.keyOff, p.text(), "push_mpls needs an Ethernet packet (packet_type=(0,0))")
			}
			// The MPLS payload is opaque: nothing is known of its protocol.
			cx.mt.v[sNwProto][0] = 0
		} else {
			typ = ofpatPopMpls
			if cx.outer != "write_actions" && (cx.packetType() != ptEth || !isMPLS()) {
				return nil, true, errAt(p.keyOff, p.text(), "pop_mpls requires an MPLS packet (match mpls or mplsm, or push_mpls first)")
			}
		}
		cx.mt.setUint(sDlType, v)
		return []byte{0, typ, 0, 8, byte(v >> 8), byte(v), 0, 0}, true, nil
	case "set_mpls_label", "set_mpls_tc":
		if err := needMPLS(); err != nil {
			return nil, true, err
		}
		b, err := cx.asSetField(p, p.val+"->"+strings.TrimPrefix(key, "set_"))
		return b, true, err
	case "set_mpls_ttl":
		v, perr := parseUint(p.val, 8)
		if perr != nil {
			return nil, true, errAt(p.valOff, p.val, "bad MPLS TTL (want 0 to 255)")
		}
		if err := needMPLS(); err != nil {
			return nil, true, err
		}
		return []byte{0, ofpatSetMplsTTL, 0, 8, byte(v), 0, 0, 0}, true, nil
	case "dec_mpls_ttl":
		if p.delim != 0 {
			return nil, true, errAt(p.keyOff, p.text(), "dec_mpls_ttl takes no argument")
		}
		if err := needMPLS(); err != nil {
			return nil, true, err
		}
		return []byte{0, ofpatDecMplsTTL, 0, 8, 0, 0, 0, 0}, true, nil
	}
	return nil, false, nil
}

// formatMplsAction prints the OpenFlow MPLS actions; ok is false for other
// types.
func formatMplsAction(a []byte) (s string, ok bool) {
	switch binary.BigEndian.Uint16(a) {
	case ofpatPushMpls:
		return fmt.Sprintf("push_mpls:0x%04x", binary.BigEndian.Uint16(a[4:])), true
	case ofpatPopMpls:
		return fmt.Sprintf("pop_mpls:0x%04x", binary.BigEndian.Uint16(a[4:])), true
	case ofpatSetMplsTTL:
		return fmt.Sprintf("set_mpls_ttl(%d)", a[4]), true
	case ofpatDecMplsTTL:
		return "dec_mpls_ttl", true
	}
	return "", false
}

// parseEncap parses encap(HEADER) and encap(nsh(md_type=N,tlv(CLASS,TYPE,HEX)...)).
func (cx *actx) parseEncap(p kv) ([]byte, error) {
	sc := newScanner(p.val, p.valOff)
	h, ok, err := sc.next()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errAt(p.keyOff, p.text(), "encap needs a header: ethernet, nsh, mpls or mpls_mc")
	}
	if rest, more, _ := sc.next(); more {
		return nil, errAt(rest.keyOff, rest.text(), "encap takes one header")
	}
	pt, found := uint32(0), false
	for _, e := range encapHeaders {
		if e.name == h.key {
			pt, found = e.pt, true
		}
	}
	if !found {
		return nil, errAt(h.keyOff, h.key, "encap header not supported (want ethernet, nsh, mpls or mpls_mc)")
	}
	b := nxHeader(nxastEncap)
	b = append(b, 0, 0) // header size: not specified
	b = binary.BigEndian.AppendUint32(b, pt)
	if h.delim != 0 {
		if pt != ptNSH {
			return nil, errAt(h.valOff, h.val, "encap(%s) takes no properties", h.key)
		}
		props, err := parseNSHProps(h.val, h.valOff)
		if err != nil {
			return nil, err
		}
		b = append(b, props...)
	}
	cx.setPacketType(pt)
	if !cx.mt.isIPAny() {
		cx.mt.v[sNwProto][0] = 0
	}
	return setLen16(b), nil
}

// parseNSHProps parses the properties of encap(nsh(...)): md_type=1|2 and
// tlv(0xCLASS,TYPE,0xHEX), each encoded padded to 8 bytes.
func parseNSHProps(s string, base int) ([]byte, error) {
	var out []byte
	sc := newScanner(s, base)
	for {
		q, ok, err := sc.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		switch q.key {
		case "md_type":
			v, err := parseUint(q.val, 8)
			if err != nil || v < 1 || v > 2 {
				return nil, errAt(q.valOff, q.val, "invalid md_type (want 1 or 2)")
			}
			out = append(out, 0, edClassNSH, edNSHMdType, 5, byte(v), 0, 0, 0)
		case "tlv":
			tlv, err := parseNSHTLV(q)
			if err != nil {
				return nil, err
			}
			out = append(out, tlv...)
		default:
			return nil, errAt(q.keyOff, q.key, "invalid property (want md_type or tlv)")
		}
	}
}

// parseNSHTLV parses tlv(0xCLASS,TYPE,0xHEX).
func parseNSHTLV(q kv) ([]byte, error) {
	parts, offs := splitTop(q.val, ',', q.valOff)
	if q.delim != '(' || len(parts) != 3 || !strings.HasPrefix(parts[0], "0x") || !strings.HasPrefix(parts[2], "0x") {
		return nil, errAt(q.keyOff, q.text(), "invalid NSH TLV header: want tlv(0xCLASS,TYPE,0xVALUE)")
	}
	class, err := parseUint(parts[0], 16)
	if err != nil {
		return nil, errAt(offs[0], parts[0], "bad TLV class (want 0x0 to 0xffff)")
	}
	typ, err := parseUint(parts[1], 8)
	if err != nil || strings.HasPrefix(parts[1], "0x") {
		return nil, errAt(offs[1], parts[1], "bad TLV type (want a decimal number up to 255)")
	}
	hexDigits := parts[2][2:]
	if hexDigits == "" || len(hexDigits)%2 != 0 || len(hexDigits) > 250 {
		return nil, errAt(offs[2], parts[2], "TLV value must be an even number of hex digits, at most 250 (OVS reads pairs and drops an odd last digit)")
	}
	if hexDigits[0] == '0' {
		// ds_put_hex drops leading zero digits: 0x0012 prints as 0x12 and
		// 0x01 as 0x1, which ofpbuf_put_hex reads as fewer bytes.
		return nil, errAt(offs[2], parts[2], "TLV value starting with a zero digit is not supported: OVS prints it without the leading zeros, which reads back as a shorter value")
	}
	val, err := parseUintBytes(parts[2], len(hexDigits)/2, len(hexDigits)*4)
	if err != nil {
		return nil, errAt(offs[2], parts[2], "bad TLV value: %v", err)
	}
	b := []byte{0, edClassNSH, edNSHTLV, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(class))
	b = append(b, byte(typ), byte(len(val)))
	b = pad8(append(b, val...))
	b[3] = byte(len(b))
	return b, nil
}

func formatEncap(a []byte) (string, error) {
	if len(a) < 16 {
		return "", errors.New("bad encap length")
	}
	pt := binary.BigEndian.Uint32(a[12:])
	name := "UNKNOWN"
	for _, e := range encapHeaders {
		if e.pt == pt {
			name = e.name
		}
	}
	var props []string
	for p := a[16:]; len(p) > 0; {
		if len(p) < 4 || int(p[3]) < 4 || (int(p[3])+7)/8*8 > len(p) || binary.BigEndian.Uint16(p) != edClassNSH {
			return "", errors.New("encap: bad property")
		}
		n := (int(p[3]) + 7) / 8 * 8
		switch p[2] {
		case edNSHMdType:
			props = append(props, fmt.Sprintf("md_type=%d", p[4]))
		case edNSHTLV:
			if len(p) < 8 || 8+int(p[7]) > n {
				return "", errors.New("encap: bad NSH TLV")
			}
			props = append(props, fmt.Sprintf("tlv(0x%04x,%d,%s)", binary.BigEndian.Uint16(p[4:]), p[6], formatHex(p[8:8+int(p[7])])))
		default:
			return "", fmt.Errorf("encap: unknown NSH property %d", p[2])
		}
		p = p[n:]
	}
	if len(props) > 0 {
		name += "(" + strings.Join(props, ",") + ")"
	}
	return "encap(" + name + ")", nil
}

// parseDecap parses decap() and decap(packet_type(ns=N,type=T)).
func (cx *actx) parseDecap(p kv) ([]byte, error) {
	pt := uint32(ptNextHdr)
	if p.val != "" {
		q, _, err := newScanner(p.val, p.valOff).next()
		if err != nil {
			return nil, err
		}
		if q.key != "packet_type" || q.delim != '(' {
			return nil, errAt(q.keyOff, q.key, "invalid decap argument (want packet_type(ns=N,type=T))")
		}
		var ns, typ uint64
		var seen int
		for r, err := range args(q.val, q.valOff) {
			if err != nil {
				return nil, err
			}
			v, err := parseUint(r.val, 16)
			switch {
			case err != nil:
				return nil, errAt(r.valOff, r.val, "bad %s (want 0 to 65535)", r.key)
			case r.key == "ns" && seen == 0:
				if v >= ofphtnNTypes {
					return nil, errAt(r.valOff, r.val, "unsupported ns value %d", v)
				}
				ns = v
			case r.key == "type" && seen == 1:
				typ = v
			default:
				return nil, errAt(r.keyOff, r.key, "decap packet_type takes ns=N then type=T")
			}
			seen++
		}
		if seen != 2 {
			return nil, errAt(q.keyOff, q.text(), "decap packet_type needs ns=N and type=T")
		}
		pt = uint32(ns<<16 | typ)
	}
	if cx.packetType() == ptEth {
		// Ethernet removed: the packet type follows the Ethernet type.
		t, _ := cx.mt.dlType()
		cx.setPacketType(ptNsEther<<16 | uint32(t))
	} else {
		// Known only once decapsulated: nothing after may rely on it.
		cx.mt.setUint(sPacketType, ptUnknown)
		cx.mt.setUint(sDlType, 0xffff)
	}
	b := append(nxHeader(nxastDecap), 0, 0)
	return setLen16(binary.BigEndian.AppendUint32(b, pt)), nil
}

func formatDecap(a []byte) string {
	pt := binary.BigEndian.Uint32(a[12:])
	if pt == ptNextHdr {
		return "decap()"
	}
	return fmt.Sprintf("decap(packet_type(ns=%d,type=%s))", pt>>16, formatHexC(uint64(pt&0xffff)))
}

// parseDecNshTTL parses dec_nsh_ttl, which needs an NSH packet.
func (cx *actx) parseDecNshTTL(p kv) ([]byte, error) {
	if p.delim != 0 {
		return nil, errAt(p.keyOff, p.text(), "dec_nsh_ttl takes no argument")
	}
	if cx.outer != "write_actions" && cx.packetType() != ptNSH && !cx.ok(preNSH) {
		return nil, errAt(p.keyOff, p.text(), "dec_nsh_ttl requires an NSH packet (match dl_type=0x894f or packet_type=(1,0x894f), or encap(nsh) first)")
	}
	return setLen16(pad8(nxHeader(nxastDecNshTTL))), nil
}
