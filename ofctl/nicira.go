package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Nicira action subtypes of the actions in this file (OVS's NXAST_RAW_*).
const (
	nxastPopQueue       = 5
	nxastNote           = 8
	nxastMultipath      = 10
	nxastFinTimeout     = 19
	nxastStackPush      = 27
	nxastStackPop       = 28
	nxastSample         = 29
	nxastSample2        = 38
	nxastOutputTrunc    = 39
	nxastSample3        = 41
	nxastClone          = 42
	nxastCheckPktLarger = 49
)

const ofpatSetQueue = 21

const nxastDecTTLCntIDs = 21

// parseDecTTLIDs parses dec_ttl(ID,...): the controllers to tell when the
// TTL runs out (NXAST_DEC_TTL_CNT_IDS).
//
// dec_ttl() is that action with no controller id, which tells no
// controller: OVS prints it so (ovn-controller sends it), but its parser
// reads dec_ttl() as plain dec_ttl (OFPAT_DEC_NW_TTL, which tells
// controller 0). Here it reads back as printed, so that the action a
// controller sent survives a print and parse.
func parseDecTTLIDs(p kv) ([]byte, error) {
	if p.delim == '(' && p.val == "" {
		b := nxHeader(nxastDecTTLCntIDs)
		b = append(b, 0, 0, 0, 0, 0, 0) // n_controllers 0, zeros
		return setLen16(pad8(b)), nil
	}
	ids := strings.FieldsFunc(p.val, func(r rune) bool { return r == ',' || r == ' ' })
	if len(ids) == 0 {
		return nil, errAt(p.keyOff, p.text(), "dec_ttl_cnt_ids: expected at least one controller id")
	}
	b := nxHeader(nxastDecTTLCntIDs)
	b = binary.BigEndian.AppendUint16(b, uint16(len(ids)))
	b = append(b, 0, 0, 0, 0)
	for _, id := range ids {
		// OVS reads the ids with atoi; insist on numbers instead.
		v, err := parseUint(id, 16)
		if err != nil {
			return nil, errAt(p.valOff+strings.Index(p.val, id), id, "bad controller id (want 0 to 65535)")
		}
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	return setLen16(pad8(b)), nil
}

func formatDecTTLIDs(a []byte) (string, error) {
	n := int(binary.BigEndian.Uint16(a[10:]))
	if 16+2*n > len(a) {
		return "", errors.New("bad dec_ttl length")
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(int(binary.BigEndian.Uint16(a[16+2*i:])))
	}
	return "dec_ttl(" + strings.Join(ids, ",") + ")", nil
}

// parseNote parses note:HEX.HEX... OVS pads the note with zero bytes to a
// multiple of 8 and prints the padding as part of the note, so the printed
// form is longer but encodes the same.
func parseNote(p kv) ([]byte, error) {
	b := nxHeader(nxastNote)
	s := p.val
	for i := 0; i < len(s); {
		if s[i] == '.' {
			i++
			if i == len(s) {
				break
			}
		}
		if i+2 > len(s) {
			return nil, errAt(p.valOff+i, s[i:], "bad hex digit in note argument")
		}
		v, err := strconv.ParseUint(s[i:i+2], 16, 8)
		if err != nil {
			return nil, errAt(p.valOff+i, s[i:i+2], "bad hex digit in note argument")
		}
		b = append(b, byte(v))
		i += 2
	}
	for len(b) < 16 {
		b = append(b, 0)
	}
	return setLen16(pad8(b)), nil
}

func formatNote(a []byte) string {
	parts := make([]string, 0, len(a)-10)
	for _, c := range a[10:] {
		parts = append(parts, fmt.Sprintf("%02x", c))
	}
	return "note:" + strings.Join(parts, ".")
}

// parseFinTimeout parses fin_timeout(idle_timeout=N,hard_timeout=N), which
// OVS allows only on TCP flows.
func (cx *actx) parseFinTimeout(p kv) ([]byte, error) {
	if !cx.consistent(preTCP) {
		return nil, errAt(p.keyOff, p.text(), "fin_timeout requires tcp or tcp6 in the match")
	}
	var idle, hard uint64
	for q, err := range args(p.val, p.valOff) {
		if err != nil {
			return nil, err
		}
		v, err := parseUint(q.val, 16)
		if err != nil {
			return nil, errAt(q.valOff, q.val, "bad %s (want 0 to 65535)", q.key)
		}
		switch q.key {
		case "idle_timeout":
			idle = v
		case "hard_timeout":
			hard = v
		default:
			return nil, errAt(q.keyOff, q.key, "invalid key in fin_timeout argument")
		}
	}
	b := nxHeader(nxastFinTimeout)
	b = binary.BigEndian.AppendUint16(b, uint16(idle))
	b = binary.BigEndian.AppendUint16(b, uint16(hard))
	b = append(b, 0, 0)
	return setLen16(b), nil
}

func formatFinTimeout(a []byte) string {
	s := "fin_timeout("
	if v := binary.BigEndian.Uint16(a[10:]); v != 0 {
		s += "idle_timeout=" + strconv.Itoa(int(v)) + ","
	}
	if v := binary.BigEndian.Uint16(a[12:]); v != 0 {
		s += "hard_timeout=" + strconv.Itoa(int(v)) + ","
	}
	return strings.TrimSuffix(s, ",") + ")"
}

// parseOutputTrunc parses output(port=P,max_len=N).
func parseOutputTrunc(p kv) ([]byte, error) {
	port, maxLen := uint16(0), uint64(0)
	for q, err := range args(p.val, p.valOff) {
		if err != nil {
			return nil, err
		}
		switch q.key {
		case "port":
			if port, err = parsePort(q.val); err != nil {
				return nil, errAt(q.valOff, q.val, "output to unknown truncate port")
			}
			if port > portMax && port != portLocal && port != portInPort {
				return nil, errAt(q.valOff, q.val, "output to unsupported truncate port")
			}
		case "max_len":
			if maxLen, err = parseUint(q.val, 32); err != nil {
				return nil, errAt(q.valOff, q.val, "bad max_len")
			}
			if maxLen < 14 {
				return nil, errAt(q.valOff, q.val, "max_len %d is less than the minimum value 14", maxLen)
			}
		default:
			return nil, errAt(q.keyOff, q.key, "invalid key in output_trunc argument")
		}
	}
	if port == 0 || maxLen == 0 {
		return nil, errAt(p.keyOff, p.text(), "output(...) needs port and max_len")
	}
	b := nxHeader(nxastOutputTrunc)
	b = binary.BigEndian.AppendUint16(b, port)
	b = binary.BigEndian.AppendUint32(b, uint32(maxLen))
	return setLen16(b), nil
}

func formatOutputTrunc(a []byte) string {
	return fmt.Sprintf("output(port=%s,max_len=%d)", formatPort(binary.BigEndian.Uint16(a[10:])), binary.BigEndian.Uint32(a[12:]))
}

// parseVLANAction handles the OpenFlow 1.0 VLAN actions, which OVS sends as
// set_field in OpenFlow 1.5. mod_vlan_vid and mod_vlan_pcp push an 802.1Q
// header first when the flow has none; set_vlan_vid and set_vlan_pcp need
// one.
func (cx *actx) parseVLANAction(p kv, key string) ([][]byte, error) {
	if p.delim == 0 || p.val == "" {
		return nil, errAt(p.keyOff, p.text(), "%s needs a value", key)
	}
	isVID := strings.HasSuffix(key, "_vid")
	v, err := parseUint(p.val, 16)
	switch {
	case isVID && (err != nil || v > vlanVIDMask):
		return nil, errAt(p.valOff, p.val, "not a valid VLAN VID (want 0 to 4095)")
	case !isVID && (err != nil || v > 7):
		return nil, errAt(p.valOff, p.val, "not a valid VLAN PCP (want 0 to 7)")
	}
	if !cx.ok(preEther) {
		return nil, errAt(p.keyOff, p.text(), "%s requires an Ethernet packet (packet_type=(0,0)); vswitchd refuses it after decap or encap of another header", key)
	}
	var out [][]byte
	if !cx.ok(preVLAN) {
		if strings.HasPrefix(key, "set_") {
			return nil, errAt(p.keyOff, p.text(), "%s requires a VLAN header in the match (e.g. vlan_tci=0x1000/0x1000); mod_%s pushes one when missing", key, key[4:])
		}
		if strings.HasPrefix(key, "mod_") {
			out = append(out, []byte{0, ofpatPushVLAN, 0, 8, 0x81, 0x00, 0, 0})
		}
		cx.mt.setBits(sVlanTCI, vlanCFI, vlanCFI)
	}
	if isVID {
		out = append(out, setFieldAction(fieldByName["vlan_vid"], putBE(v|vlanCFI, 2), nil))
	} else {
		out = append(out, setFieldAction(fieldByName["vlan_pcp"], []byte{byte(v)}, nil))
	}
	return out, nil
}

// parseStack parses push:SRC[] and pop:DST[].
func (cx *actx) parseStack(p kv, push bool) ([]byte, error) {
	sf, err := parseSubfieldAny(p.val)
	if err != nil {
		return nil, errAt(p.valOff, p.val, "%v", err)
	}
	sub := uint16(nxastStackPop)
	if push {
		sub = nxastStackPush
		if !cx.ok(sf.f.pre) {
			return nil, errAt(p.valOff, p.val, "reading %s requires %s in the match", sf.f.name, prereqText(sf.f.pre))
		}
	} else if err := cx.checkWritable(sf.f, p.valOff, p.val); err != nil {
		return nil, err
	}
	b := nxHeader(sub)
	b = binary.BigEndian.AppendUint16(b, uint16(sf.ofs))
	b = append(b, nxmID(sf.f, cx.mt.tlv)...)
	b = binary.BigEndian.AppendUint16(b, uint16(sf.bits))
	for len(b) < 24 {
		b = append(b, 0)
	}
	return setLen16(b), nil
}

func formatStack(a []byte) (string, error) {
	if len(a) != 24 {
		return "", errors.New("bad push/pop length")
	}
	f, n, err := pullNXMID(a[12:])
	if err != nil {
		return "", fmt.Errorf("push/pop: %w", err)
	}
	ofs, bits := int(binary.BigEndian.Uint16(a[10:])), int(binary.BigEndian.Uint16(a[12+n:]))
	if bits == 0 || ofs+bits > f.bits {
		return "", errors.New("push/pop: bad bit range")
	}
	name := "push:"
	if binary.BigEndian.Uint16(a[8:]) == nxastStackPop {
		name = "pop:"
	}
	return name + subfield{f, ofs, bits}.String(), nil
}

// parseExtraAction parses the actions of this file; ok is false for other
// keys.
func (cx *actx) parseExtraAction(p kv, key string) (acts [][]byte, ok bool, err error) {
	one := func(b []byte, err error) ([][]byte, bool, error) {
		if err != nil {
			return nil, true, err
		}
		return [][]byte{b}, true, nil
	}
	switch key {
	case "note":
		return one(parseNote(p))
	case "clone":
		return one(cx.parseClone(p))
	case "sample":
		return one(parseSample(p))
	case "check_pkt_larger":
		return one(cx.parseCheckPktLarger(p))
	case "multipath":
		return one(cx.parseMultipath(p))
	case "fin_timeout":
		return one(cx.parseFinTimeout(p))
	case "set_queue":
		v, err := parseUint(p.val, 32)
		if err != nil {
			return nil, true, errAt(p.valOff, p.val, "bad queue id (want a 32-bit number)")
		}
		return one(action32(ofpatSetQueue, uint32(v)), nil)
	case "pop_queue":
		if p.delim != 0 {
			return nil, true, errAt(p.keyOff, p.text(), "pop_queue takes no argument")
		}
		return one(popQueue(), nil)
	case "enqueue":
		acts, err := cx.parseEnqueue(p)
		return acts, true, err
	case "mod_vlan_vid", "mod_vlan_pcp", "set_vlan_vid", "set_vlan_pcp":
		acts, err := cx.parseVLANAction(p, key)
		return acts, true, err
	case "set_tunnel", "set_tunnel64":
		if _, err := parseUint(p.val, 64); err != nil {
			return nil, true, errAt(p.valOff, p.val, "bad tunnel id (want a 64-bit number)")
		}
		return one(cx.asSetField(p, p.val+"->tun_id"))
	case "push", "pop":
		return one(cx.parseStack(p, key == "push"))
	case "delete_field":
		return one(cx.parseDeleteField(p))
	case "debug_slow", "debug_recirc":
		return nil, true, errAt(p.keyOff, p.text(), "%s is for testing Open vSwitch: only a vswitchd started with --enable-dummy accepts it "+
			"(others refuse it as OFPBAC_BAD_VENDOR_TYPE), and ovs-ofctl cannot print a flow that holds it", key)
	case "encap":
		return one(cx.parseEncap(p))
	case "decap":
		return one(cx.parseDecap(p))
	case "dec_nsh_ttl":
		return one(cx.parseDecNshTTL(p))
	case "bundle", "bundle_load":
		return one(cx.parseBundle(p, key == "bundle_load"))
	}
	if b, ok, err := cx.parseMplsAction(p, key); ok {
		return one(b, err)
	}
	return nil, false, nil
}

// formatExtraNX prints the Nicira actions of this file; ok is false for
// other subtypes.
func formatExtraNX(a []byte, sub uint16) (s string, ok bool, err error) {
	switch sub {
	case nxastNote:
		return formatNote(a), true, nil
	case nxastClone:
		s, err = formatClone(a)
	case nxastSample, nxastSample2, nxastSample3:
		s, err = formatSample(a)
	case nxastCheckPktLarger:
		s, err = formatCheckPktLarger(a)
	case nxastMultipath:
		s, err = formatMultipath(a)
	case nxastFinTimeout:
		return formatFinTimeout(a), true, nil
	case nxastPopQueue:
		return "pop_queue", true, nil
	case nxastOutputTrunc:
		return formatOutputTrunc(a), true, nil
	case nxastStackPush, nxastStackPop:
		s, err = formatStack(a)
	case nxastDelete:
		s, err = formatDeleteField(a)
	case nxastDecTTLCntIDs:
		s, err = formatDecTTLIDs(a)
	case nxastEncap:
		s, err = formatEncap(a)
	case nxastDecap:
		return formatDecap(a), true, nil
	case nxastDecNshTTL:
		return "dec_nsh_ttl", true, nil
	case nxastBundle, nxastBundleLoad:
		s, err = formatBundle(a)
	default:
		return "", false, nil
	}
	return s, true, err
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
