// One action: the dispatch by name (parseActionTo, formatAction) and the core
// actions it handles itself (output and the controller port, resubmit,
// conjunction); controller(...) with arguments is in controller.go.

package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

func isNX(a []byte, subtype uint16) bool {
	return len(a) >= 10 && binary.BigEndian.Uint16(a) == ofpatVendor &&
		binary.BigEndian.Uint32(a[4:]) == nxVendor && binary.BigEndian.Uint16(a[8:]) == subtype
}

// parseAction parses one action (not an instruction).
func (cx *actx) parseAction(p kv, key string) ([][]byte, error) {
	return cx.parseActionTo(nil, p, key)
}

// parseActionTo is parseAction appending to dst, which spares a slice per
// action in a list.
func (cx *actx) parseActionTo(dst [][]byte, p kv, key string) ([][]byte, error) {
	switch cx.outer {
	case "ct":
		switch key {
		case "set_field", "load", "move":
		default:
			return nil, errAt(p.keyOff, p.text(), "only set_field, load and move to ct_mark or ct_label are allowed inside ct(exec(...))")
		}
	case "write_actions":
		// The actions OVS allows in an action set.
		switch key {
		case "controller":
			// A plain controller action is an output, which an action set
			// may hold; controller(...) with options is not.
			if b, err := cx.parseController(p); err == nil && binary.BigEndian.Uint16(b) != ofpatOutput {
				return nil, errAt(p.keyOff, p.text(), "write_actions supports controller only without reason, id, userdata, pause or meter_id")
			}
		case "meter", "learn", "conjunction", "exit":
			return nil, errAt(p.keyOff, p.text(), "write_actions does not support nested action %s", key)
		case "note", "clone", "bundle", "bundle_load", "sample", "push", "pop", "multipath", "fin_timeout", "pop_queue",
			"check_pkt_larger", "delete_field":
			// ovs-ofctl sends these, but an action set cannot hold them
			// (OVS's action_set_classify).
			return nil, errAt(p.keyOff, p.text(), "write_actions does not support nested action %s: vswitchd would refuse the flow (disallowed action in action set)", key)
		case "output":
			if _, err := parsePort(p.val); err != nil {
				return nil, errAt(p.keyOff, p.text(), "write_actions supports output to ports only")
			}
		}
	}
	one := func(b []byte, err error) ([][]byte, error) {
		if err != nil {
			return nil, err
		}
		return append(dst, b), nil
	}
	switch key {
	case "output":
		return one(cx.parseOutput(p))
	case "controller":
		return one(cx.parseController(p))
	case "group":
		v, err := parseUint(p.val, 32)
		if err != nil || v > 0xffffff00 {
			return nil, errAt(p.valOff, p.val, "bad group id")
		}
		return one(action32(ofpatGroup, uint32(v)), nil)
	case "meter":
		v, err := parseUint(p.val, 32)
		if err != nil || v == 0 || v > 0xffff0000 {
			return nil, errAt(p.valOff, p.val, "bad meter id")
		}
		return one(action32(ofpatMeter, uint32(v)), nil)
	case "set_field":
		return one(cx.parseSetField(p))
	case "load":
		return one(cx.parseLoad(p))
	case "move":
		return one(cx.parseMove(p))
	case "push_vlan":
		v, err := parseUint(p.val, 16)
		if err != nil || (v != 0x8100 && v != 0x88a8) {
			return nil, errAt(p.valOff, p.val, "push_vlan ethertype must be 0x8100 or 0x88a8")
		}
		b := []byte{0, ofpatPushVLAN, 0, 8, byte(v >> 8), byte(v), 0, 0}
		// The pushed header is present for the actions that follow.
		cx.mt.setBits(sVlanTCI, vlanCFI, vlanCFI)
		return one(b, nil)
	case "pop_vlan", "strip_vlan":
		if p.delim != 0 {
			return nil, errAt(p.keyOff, p.text(), "%s takes no argument", key)
		}
		if !cx.consistent(preVLAN) {
			return nil, errAt(p.keyOff, p.text(), "%s requires a VLAN header in the match (e.g. vlan_tci=0x1000/0x1000)", key)
		}
		cx.mt.set(sVlanTCI, []byte{0, 0}, []byte{0, 0})
		return one([]byte{0, ofpatPopVLAN, 0, 8, 0, 0, 0, 0}, nil)
	case "dec_ttl":
		if !cx.consistent(preIPAny) {
			return nil, errAt(p.keyOff, p.text(), "dec_ttl requires ip or ipv6 in the match")
		}
		if p.val != "" || p.delim == '(' {
			// dec_ttl(...), dec_ttl() included: NXAST_DEC_TTL_CNT_IDS.
			return one(parseDecTTLIDs(p))
		}
		return one([]byte{0, ofpatDecNwTTL, 0, 8, 0, 0, 0, 0}, nil)
	case "resubmit":
		return one(cx.parseResubmit(p))
	case "ct":
		return one(cx.parseCT(p))
	case "ct_clear":
		if p.delim != 0 {
			return nil, errAt(p.keyOff, p.text(), "ct_clear takes no argument")
		}
		return one(setLen16(pad8(nxHeader(nxastCTClear))), nil)
	case "exit":
		if p.delim != 0 {
			return nil, errAt(p.keyOff, p.text(), "exit takes no argument")
		}
		return one(setLen16(pad8(nxHeader(nxastExit))), nil)
	case "conjunction":
		return one(parseConjunction(p))
	case "learn":
		return one(cx.parseLearn(p))
	case "nat":
		return nil, errAt(p.keyOff, p.text(), "nat is only allowed inside ct(...)")
	case "mod_nw_ttl":
		v, err := parseUint(p.val, 8)
		if err != nil {
			return nil, errAt(p.valOff, p.val, "bad TTL (want 0 to 255)")
		}
		if !cx.consistent(preIPAny) {
			return nil, errAt(p.keyOff, p.text(), "mod_nw_ttl requires ip or ipv6 in the match")
		}
		return one([]byte{0, ofpatSetNwTTL, 0, 8, byte(v), 0, 0, 0}, nil)
	case "mod_nw_tos":
		v, err := parseUint(p.val, 8)
		if err != nil || v&3 != 0 {
			return nil, errAt(p.valOff, p.val, "bad TOS value (want a multiple of 4 up to 252)")
		}
		// OVS sends the DSCP bits as OXM ip_dscp.
		return one(cx.asSetField(p, strconv.FormatUint(v>>2, 10)+"->ip_dscp"))
	case "mod_dl_src", "mod_dl_dst", "mod_nw_src", "mod_nw_dst", "mod_tp_src", "mod_tp_dst", "mod_nw_ecn":
		return one(cx.parseModAction(p, key))
	}
	if acts, ok, err := cx.parseExtraAction(p, key); ok {
		if err != nil {
			return nil, err
		}
		return append(dst, acts...), nil
	}
	if p.delim == 0 {
		if port, err := parsePort(p.key); err == nil {
			return one(cx.outputPort(p, port, 0))
		}
	}
	return nil, errAt(p.keyOff, p.key, "unknown action")
}

func action32(typ uint16, v uint32) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b, typ)
	binary.BigEndian.PutUint16(b[2:], 8)
	binary.BigEndian.PutUint32(b[4:], v)
	return b
}

// outputPort encodes OFPAT_OUTPUT after OVS's port checks.
func (cx *actx) outputPort(p kv, port uint16, maxLen uint16) ([]byte, error) {
	switch port {
	case portNone, portUnset:
		return nil, errAt(p.keyOff, p.text(), "invalid output port")
	case portController:
		if maxLen == 0 && p.delim == 0 {
			maxLen = 0xffff
		}
	}
	b := make([]byte, 16)
	binary.BigEndian.PutUint16(b, ofpatOutput)
	binary.BigEndian.PutUint16(b[2:], 16)
	binary.BigEndian.PutUint32(b[4:], port11(port))
	binary.BigEndian.PutUint16(b[8:], maxLen)
	return b, nil
}

func (cx *actx) parseOutput(p kv) ([]byte, error) {
	if p.delim == 0 || p.val == "" {
		return nil, errAt(p.keyOff, p.text(), "output needs a port")
	}
	if strings.Contains(p.val, "port") && strings.Contains(p.val, "max_len") {
		return parseOutputTrunc(p)
	}
	if port, err := parsePort(p.val); err == nil {
		if port == portController {
			return cx.outputPort(p, port, 0xffff)
		}
		return cx.outputPort(p, port, 0)
	}
	sf, err := parseSubfieldAny(p.val)
	if err != nil {
		return nil, errAt(p.valOff, p.val, "bad output port or field: %v", err)
	}
	if sf.bits > 16 && !(sf.ofs == 0 && sf.bits == sf.f.bits && sf.f.bits == 32) {
		return nil, errAt(p.valOff, p.val, "output field may be at most 16 bits wide (or a whole 32-bit field)")
	}
	if !cx.ok(sf.f.pre) {
		return nil, errAt(p.valOff, p.val, "%s requires %s in the match", sf.f.name, prereqText(sf.f.pre))
	}
	id := nxmID(sf.f, cx.mt.tlv)
	if len(id) == 8 {
		// NXAST_OUTPUT_REG2 takes an experimenter's 8-byte header after
		// max_len.
		b := nxHeader(nxastOutputReg2)
		b = binary.BigEndian.AppendUint16(b, ofsNbits(sf.ofs, sf.bits))
		b = binary.BigEndian.AppendUint16(b, 0xffff)
		b = append(b, id...)
		return setLen16(pad8(b)), nil
	}
	b := nxHeader(nxastOutputReg)
	b = binary.BigEndian.AppendUint16(b, ofsNbits(sf.ofs, sf.bits))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint16(b, 0xffff)
	b = append(b, make([]byte, 6)...)
	return setLen16(b), nil
}

func (cx *actx) parseController(p kv) ([]byte, error) {
	if p.delim == 0 || p.val == "" {
		return cx.outputPort(kv{}, portController, 0xffff)
	}
	if strings.Trim(p.val, "0123456789") == "" {
		n, err := parseUint(p.val, 16)
		if err != nil {
			return nil, errAt(p.valOff, p.val, "bad controller max_len")
		}
		return cx.outputPort(p, portController, uint16(n))
	}
	return parseControllerArgs(p)
}

func (cx *actx) parseResubmit(p kv) ([]byte, error) {
	if p.val == "" {
		return nil, errAt(p.keyOff, p.text(), "resubmit needs a port or table")
	}
	port, table, withCT := uint16(portInPort), uint64(255), false
	var err error
	if p.delim == '(' || strings.Contains(p.val, ",") {
		parts := strings.Split(p.val, ",")
		if len(parts) > 3 {
			return nil, errAt(p.valOff, p.val, "too many arguments to resubmit")
		}
		if parts[0] != "" {
			if port, err = parsePort(parts[0]); err != nil {
				return nil, errAt(p.valOff, parts[0], "%v", err)
			}
		}
		if len(parts) > 1 && parts[1] != "" {
			if table, err = parseUint(parts[1], 8); err != nil || table == 255 {
				return nil, errAt(p.valOff, p.val, "bad table id %q (want 0 to 254)", parts[1])
			}
		}
		if len(parts) > 2 {
			if parts[2] != "ct" {
				return nil, errAt(p.valOff, p.val, "third argument to resubmit must be \"ct\"")
			}
			withCT = true
		}
	} else if port, err = parsePort(p.val); err != nil {
		return nil, errAt(p.valOff, p.val, "%v", err)
	}
	if port == portInPort && table == 255 {
		return nil, errAt(p.keyOff, p.text(), "at least one of \"in_port\" and \"table\" must be specified on resubmit")
	}
	if withCT && !cx.ok(preCt) {
		return nil, errAt(p.keyOff, p.text(), "resubmit with ct requires a match on a valid connection (e.g. ct_state=+est+trk or ct_state=+trk-inv)")
	}
	sub := uint16(nxastResubmitTable)
	if withCT {
		sub = nxastResubmitCT
	}
	b := nxHeader(sub)
	b = binary.BigEndian.AppendUint16(b, port)
	b = append(b, byte(table), 0, 0, 0)
	return setLen16(b), nil
}

func parseConjunction(p kv) ([]byte, error) {
	var id, k, n uint32
	if _, err := fmt.Sscanf(p.val, "%d,%d/%d", &id, &k, &n); err != nil ||
		p.val != fmt.Sprintf("%d,%d/%d", id, k, n) && strings.ReplaceAll(p.val, " ", "") != fmt.Sprintf("%d,%d/%d", id, k, n) {
		return nil, errAt(p.keyOff, p.text(), "conjunction needs (id,k/n)")
	}
	if n < 2 || n > 64 {
		return nil, errAt(p.keyOff, p.text(), "conjunction must have between 2 and 64 clauses")
	}
	if k < 1 || k > n {
		return nil, errAt(p.keyOff, p.text(), "clause index must be between 1 and the number of clauses")
	}
	b := nxHeader(nxastConjunction)
	b = append(b, byte(k-1), byte(n))
	b = binary.BigEndian.AppendUint32(b, id)
	return setLen16(b), nil
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
