package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// FormatFlow prints fm as `ovs-ofctl -O OpenFlow15 --no-stats dump-flows`
// prints the flow, without the leading space: for example
// "table=1, priority=100,ct_state=+inv+trk,ip actions=drop". It works from
// fm's encoding, so FlowMods decoded by libOpenflow print the same as parsed
// ones. It returns an error, never panics, for flows it cannot print.
func FormatFlow(fm *openflow15.FlowMod) (s string, err error) {
	if fm == nil {
		return "", errors.New("ofctl: format flow: nil FlowMod")
	}
	b, err := marshalFlowMod(fm)
	if err != nil {
		return "", err
	}
	return formatFlowBytes(b)
}

// marshalFlowMod encodes fm, turning a panic of an incomplete message (nil
// actions, nil field values) into an error.
func marshalFlowMod(fm *openflow15.FlowMod) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("ofctl: format flow: cannot encode FlowMod: %v", r)
		}
	}()
	b, err = fm.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("ofctl: format flow: encode FlowMod: %w", err)
	}
	return b, nil
}

// formatFlowBytes prints an encoded OpenFlow 1.5 FLOW_MOD.
func formatFlowBytes(b []byte) (string, error) {
	if len(b) < 56 {
		return "", errors.New("ofctl: format flow: message too short")
	}
	cookie := binary.BigEndian.Uint64(b[8:])
	table := b[24]
	idle := binary.BigEndian.Uint16(b[26:])
	hard := binary.BigEndian.Uint16(b[28:])
	prio := binary.BigEndian.Uint16(b[30:])
	flags := binary.BigEndian.Uint16(b[44:])
	importance := binary.BigEndian.Uint16(b[46:])
	mlen := int(binary.BigEndian.Uint16(b[50:]))
	if binary.BigEndian.Uint16(b[48:]) != openflow15.MatchType_OXM || mlen < 4 || 48+mlen > len(b) {
		return "", errors.New("ofctl: format flow: bad match")
	}
	mt, err := decodeOXMs(b[52 : 48+mlen])
	if err != nil {
		return "", fmt.Errorf("ofctl: format flow: %w", err)
	}
	insOff := 48 + (mlen+7)/8*8
	if insOff > len(b) {
		return "", errors.New("ofctl: format flow: truncated match")
	}
	acts, err := formatInstructions(b[insOff:])
	if err != nil {
		return "", fmt.Errorf("ofctl: format flow: %w", err)
	}
	var sb strings.Builder
	if cookie != 0 {
		fmt.Fprintf(&sb, "cookie=0x%x, ", cookie)
	}
	if table != 0 {
		fmt.Fprintf(&sb, "table=%d, ", table)
	}
	if idle != 0 {
		fmt.Fprintf(&sb, "idle_timeout=%d, ", idle)
	}
	if hard != 0 {
		fmt.Fprintf(&sb, "hard_timeout=%d, ", hard)
	}
	for _, f := range flowFlags {
		if flags&f.bit != 0 {
			sb.WriteString(f.name + " ")
		}
	}
	if importance != 0 {
		fmt.Fprintf(&sb, "importance=%d, ", importance)
	}
	if m := mt.format(prio); m != "" {
		sb.WriteString(m)
		sb.WriteByte(' ')
	}
	sb.WriteString("actions=")
	sb.WriteString(acts)
	return sb.String(), nil
}

// formatInstructions prints an instruction list as ofpacts_format does.
func formatInstructions(b []byte) (string, error) {
	var parts []string
	for len(b) > 0 {
		if len(b) < 8 {
			return "", errors.New("truncated instruction")
		}
		typ := binary.BigEndian.Uint16(b)
		n := int(binary.BigEndian.Uint16(b[2:]))
		if n < 8 || n > len(b) || n%8 != 0 {
			return "", fmt.Errorf("bad instruction length %d", n)
		}
		body := b[:n]
		b = b[n:]
		switch typ {
		case openflow15.InstrType_GOTO_TABLE:
			parts = append(parts, "goto_table:"+strconv.Itoa(int(body[4])))
		case openflow15.InstrType_WRITE_METADATA:
			if n != 24 {
				return "", errors.New("bad write_metadata length")
			}
			v, m := binary.BigEndian.Uint64(body[8:]), binary.BigEndian.Uint64(body[16:])
			s := "write_metadata:" + formatHexC(v)
			if m != ^uint64(0) {
				s += "/" + formatHexC(m)
			}
			parts = append(parts, s)
		case openflow15.InstrType_APPLY_ACTIONS:
			acts, err := formatActionList(body[8:])
			if err != nil {
				return "", err
			}
			if acts != "" {
				parts = append(parts, acts)
			}
		case openflow15.InstrType_WRITE_ACTIONS:
			acts, err := formatActionList(body[8:])
			if err != nil {
				return "", err
			}
			parts = append(parts, "write_actions("+acts+")")
		case openflow15.InstrType_CLEAR_ACTIONS:
			parts = append(parts, "clear_actions")
		default:
			return "", fmt.Errorf("unsupported instruction type %d", typ)
		}
	}
	if len(parts) == 0 {
		return "drop", nil
	}
	return strings.Join(parts, ","), nil
}

// splitActions splits an encoded action list into actions.
func splitActions(b []byte) ([][]byte, error) {
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 8 {
			return nil, errors.New("truncated action")
		}
		n := int(binary.BigEndian.Uint16(b[2:]))
		if n < 8 || n > len(b) || n%8 != 0 {
			return nil, fmt.Errorf("bad action length %d", n)
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out, nil
}

// formatActionList prints actions separated by commas.
func formatActionList(b []byte) (string, error) {
	acts, err := splitActions(b)
	if err != nil {
		return "", err
	}
	parts := make([]string, 0, len(acts))
	for _, a := range acts {
		s, err := formatAction(a)
		if err != nil {
			return "", err
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ","), nil
}

// formatAction prints one encoded action as OVS does.
func formatAction(a []byte) (string, error) {
	typ := binary.BigEndian.Uint16(a)
	switch typ {
	case ofpatOutput:
		if len(a) != 16 {
			return "", errors.New("bad output action length")
		}
		p, ok := port10(binary.BigEndian.Uint32(a[4:]))
		if !ok {
			return "", fmt.Errorf("bad output port %#x", binary.BigEndian.Uint32(a[4:]))
		}
		maxLen := binary.BigEndian.Uint16(a[8:])
		switch {
		case p == portController:
			return "CONTROLLER:" + strconv.Itoa(int(maxLen)), nil
		case p < portMax:
			return "output:" + strconv.Itoa(int(p)), nil
		}
		return formatPort(p), nil
	case ofpatSetQueue:
		return "set_queue:" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(a[4:])), 10), nil
	case ofpatGroup:
		return "group:" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(a[4:])), 10), nil
	case ofpatMeter:
		return "meter:" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(a[4:])), 10), nil
	case ofpatDecNwTTL:
		return "dec_ttl", nil
	case ofpatSetNwTTL:
		return "mod_nw_ttl:" + strconv.Itoa(int(a[4])), nil
	case ofpatPopVLAN:
		return "pop_vlan", nil
	case ofpatPushVLAN:
		return fmt.Sprintf("push_vlan:0x%x", binary.BigEndian.Uint16(a[4:])), nil
	case ofpatPushMpls, ofpatPopMpls, ofpatSetMplsTTL, ofpatDecMplsTTL:
		s, _ := formatMplsAction(a)
		return s, nil
	case ofpatSetField:
		return formatSetField(a)
	case ofpatCopyField:
		return formatCopyField(a)
	case ofpatVendor:
		if len(a) < 16 || binary.BigEndian.Uint32(a[4:]) != nxVendor {
			return "", errors.New("unsupported experimenter action")
		}
		return formatNX(a)
	}
	return "", fmt.Errorf("unsupported action type %d", typ)
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

// formatNX prints a Nicira extension action.
func formatNX(a []byte) (string, error) {
	sub := binary.BigEndian.Uint16(a[8:])
	switch sub {
	case nxastResubmit, nxastResubmitTable, nxastResubmitCT:
		port := binary.BigEndian.Uint16(a[10:])
		table := byte(255)
		if sub != nxastResubmit {
			table = a[12]
		}
		if port != portInPort && table == 255 && sub != nxastResubmitCT {
			return "resubmit:" + formatPort(port), nil
		}
		s := "resubmit("
		if port != portInPort {
			s += formatPort(port)
		}
		s += ","
		if table != 255 {
			s += strconv.Itoa(int(table))
		}
		if sub == nxastResubmitCT {
			s += ",ct"
		}
		return s + ")", nil
	case nxastOutputReg, nxastOutputReg2:
		// OUTPUT_REG has the field before max_len, OUTPUT_REG2 after it.
		hdrAt, mlAt := 12, 16
		if sub == nxastOutputReg2 {
			hdrAt, mlAt = 14, 12
		}
		if len(a) != 24 {
			return "", errors.New("bad output_reg length")
		}
		f, _, err := pullNXMID(a[hdrAt:])
		if err != nil {
			return "", fmt.Errorf("output: %w", err)
		}
		sf, err := decodeOfsNbits(f, binary.BigEndian.Uint16(a[10:]))
		if err != nil {
			return "", fmt.Errorf("output: %w", err)
		}
		s := "output:" + sf.String()
		if ml := binary.BigEndian.Uint16(a[mlAt:]); ml != 0xffff {
			return "", fmt.Errorf("output_reg with max_len %d is not supported", ml)
		}
		return s, nil
	case nxastConjunction:
		return fmt.Sprintf("conjunction(%d,%d/%d)", binary.BigEndian.Uint32(a[12:]), int(a[10])+1, a[11]), nil
	case nxastCT:
		return formatCT(a)
	case nxastNAT:
		return formatNAT(a)
	case nxastCTClear:
		return "ct_clear", nil
	case nxastExit:
		return "exit", nil
	case nxastLearn, nxastLearn2:
		return formatLearn(a)
	case nxastController2:
		return formatController2(a)
	case nxastController:
		return formatController1(a)
	}
	if s, ok, err := formatExtraNX(a, sub); ok {
		return s, err
	}
	return "", fmt.Errorf("unsupported Nicira action subtype %d", sub)
}

func formatCT(a []byte) (string, error) {
	if len(a) < 24 {
		return "", errors.New("bad ct length")
	}
	flags := binary.BigEndian.Uint16(a[10:])
	zoneSrc := binary.BigEndian.Uint32(a[12:])
	zone := binary.BigEndian.Uint16(a[16:])
	table := a[18]
	alg := binary.BigEndian.Uint16(a[22:])
	var sb strings.Builder
	sb.WriteString("ct(")
	if flags&ctCommit != 0 {
		sb.WriteString("commit,")
	}
	if flags&ctForce != 0 {
		sb.WriteString("force,")
	}
	if table != 0xff {
		fmt.Fprintf(&sb, "table=%d,", table)
	}
	if zoneSrc != 0 {
		sf, err := nxmSubfield(zoneSrc, zone)
		if err != nil {
			return "", fmt.Errorf("ct zone: %w", err)
		}
		sb.WriteString("zone=" + sf.String() + ",")
	} else if zone != 0 {
		fmt.Fprintf(&sb, "zone=%d,", zone)
	}
	nested, err := splitActions(a[24:])
	if err != nil {
		return "", fmt.Errorf("ct: %w", err)
	}
	if len(nested) > 0 && isNX(nested[0], nxastNAT) {
		s, err := formatNAT(nested[0])
		if err != nil {
			return "", err
		}
		sb.WriteString(s + ",")
		nested = nested[1:]
	}
	if len(nested) > 0 {
		var parts []string
		for _, n := range nested {
			s, err := formatAction(n)
			if err != nil {
				return "", fmt.Errorf("ct exec: %w", err)
			}
			parts = append(parts, s)
		}
		sb.WriteString("exec(" + strings.Join(parts, ",") + "),")
	}
	switch alg {
	case 0:
	case algFTP:
		sb.WriteString("alg=ftp,")
	case algTFTP:
		sb.WriteString("alg=tftp,")
	default:
		fmt.Fprintf(&sb, "alg=%d,", alg)
	}
	return strings.TrimSuffix(sb.String(), ",") + ")", nil
}

func formatNAT(a []byte) (string, error) {
	if len(a) < 16 {
		return "", errors.New("bad nat length")
	}
	flags := binary.BigEndian.Uint16(a[12:])
	present := binary.BigEndian.Uint16(a[14:])
	body := a[16:]
	take := func(n int) ([]byte, error) {
		if len(body) < n {
			return nil, errors.New("truncated nat action")
		}
		v := body[:n]
		body = body[n:]
		return v, nil
	}
	var minA, maxA []byte
	var pmin, pmax uint16
	v6 := false
	var err error
	if present&(natIPv4Min|natIPv4Max) != 0 && present&(natIPv6Min|natIPv6Max) != 0 {
		return "", errors.New("nat with both IPv4 and IPv6 ranges")
	}
	if present&natIPv4Min != 0 {
		if minA, err = take(4); err != nil {
			return "", err
		}
	}
	if present&natIPv4Max != 0 {
		if maxA, err = take(4); err != nil {
			return "", err
		}
	}
	if present&natIPv6Min != 0 {
		v6 = true
		if minA, err = take(16); err != nil {
			return "", err
		}
	}
	if present&natIPv6Max != 0 {
		v6 = true
		if maxA, err = take(16); err != nil {
			return "", err
		}
	}
	if present&natProtoMin != 0 {
		p, err := take(2)
		if err != nil {
			return "", err
		}
		pmin = binary.BigEndian.Uint16(p)
	}
	if present&natProtoMax != 0 {
		p, err := take(2)
		if err != nil {
			return "", err
		}
		pmax = binary.BigEndian.Uint16(p)
	}
	s := "nat"
	if flags&(natSrc|natDst) == 0 {
		return s, nil
	}
	s += "("
	if flags&natSrc != 0 {
		s += "src"
	} else {
		s += "dst"
	}
	if present&(natIPv4Min|natIPv4Max|natIPv6Min|natIPv6Max) != 0 {
		width := 4
		if v6 {
			width = 16
		}
		if minA == nil {
			minA = make([]byte, width)
		}
		addr := func(b []byte) string {
			if !v6 {
				return formatIPv4(b)
			}
			if pmin != 0 {
				return "[" + formatIPv6(b) + "]"
			}
			return formatIPv6(b)
		}
		s += "=" + addr(minA)
		if maxA != nil && !isZero(maxA) && string(maxA) != string(minA) {
			s += "-" + addr(maxA)
		}
		if pmin != 0 {
			s += ":" + strconv.Itoa(int(pmin))
			if pmax != 0 && pmax != pmin {
				s += "-" + strconv.Itoa(int(pmax))
			}
		}
		s += ","
		if flags&natPersistent != 0 {
			s += "persistent,"
		}
		if flags&natHash != 0 {
			s += "hash,"
		}
		if flags&natRandom != 0 {
			s += "random,"
		}
	}
	return strings.TrimSuffix(s, ",") + ")", nil
}
