package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// instrSet is a parsed action list split into OpenFlow 1.1+ instructions,
// each action already encoded as OVS encodes it for OpenFlow 1.5.
type instrSet struct {
	apply     [][]byte
	clear     bool
	write     [][]byte
	hasWrite  bool
	meta      []byte // value and mask, 16 bytes, or nil
	gotoTable int    // -1 when absent
	// applyBuf backs apply for the few actions of most lists, in the
	// same allocation as the set.
	applyBuf [4][]byte
}

// Instruction stages in the order OVS requires them.
const (
	stageApply = iota
	stageClear
	stageWrite
	stageMeta
	stageGoto
)

var stageNames = []string{"apply_actions", "clear_actions", "write_actions", "write_metadata", "goto_table"}

// actx is the context actions are checked in: the flow as the actions so
// far leave it (only the VLAN header changes), the table the flow is in, and
// the enclosing action for nested lists ("ct" or "write_actions").
type actx struct {
	mt    match
	table uint8
	outer string
	// anyMatch skips the checks against the flow's match, for actions
	// that have none (group buckets).
	anyMatch bool
	// depth is the number of action lists this one is nested in.
	depth int
	// parens indexes the parentheses of a long line, or is nil.
	parens *parenIndex
}

// nested returns the context of an action list nested in cx's under the
// action outer.
func (cx *actx) nested(outer string) *actx {
	return &actx{mt: cx.mt, table: cx.table, outer: outer, anyMatch: cx.anyMatch, depth: cx.depth + 1, parens: cx.parens}
}

// ok reports whether the flow satisfies prerequisite p for an action.
func (cx *actx) ok(p prereq) bool {
	return cx.anyMatch || cx.mt.prereqOK(p)
}

// consistent reports whether an action that needs p in the flow may be
// used. OVS checks that only outside write_actions: an action set is not
// checked against the match (check_WRITE_ACTIONS).
func (cx *actx) consistent(p prereq) bool {
	return cx.outer == "write_actions" || cx.ok(p)
}

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

// parseActions parses an action list (the text after "actions=").
func (cx *actx) parseActions(s string, base int) (*instrSet, error) {
	is := new(instrSet)
	if err := cx.parseActionsTo(is, s, base); err != nil {
		return nil, err
	}
	return is, nil
}

// parseActionsTo is parseActions into is, whose apply slice it reuses
// (a pooled set keeps its capacity).
func (cx *actx) parseActionsTo(is *instrSet, s string, base int) error {
	apply := is.apply[:0]
	if apply == nil {
		apply = is.applyBuf[:0]
	}
	*is = instrSet{gotoTable: -1, apply: apply}
	if cx.depth >= MaxActionDepth {
		return errLimit(base, s, tooDeep())
	}
	sc := newScanner(s, base)
	sc.parens = cx.parens
	stage := stageApply
	encoded := 0 // bytes of the actions so far
	drop, meterSeen := false, false
	var dropTok kv
	n := 0
	enter := func(p kv, st int) error {
		if cx.outer != "" {
			return errAt(p.keyOff, p.text(), "instruction %s is not allowed inside %s", stageNames[st], cx.outer)
		}
		if st == stage && st != stageApply {
			return errAt(p.keyOff, p.text(), "duplicate %s instruction not allowed", stageNames[st])
		}
		if st < stage {
			return errAt(p.keyOff, p.text(), "invalid instruction ordering: %s must appear before %s", stageNames[st], stageNames[stage])
		}
		stage = st
		return nil
	}
	for {
		p, ok, err := sc.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		key := strings.ToLower(p.key)
		if key == "drop" {
			if !drop {
				dropTok = p
			}
			drop = true
			continue
		}
		n++
		switch key {
		case "apply_actions":
			return errAt(p.keyOff, p.text(), "apply_actions is the default instruction")
		case "goto_table":
			if err := enter(p, stageGoto); err != nil {
				return err
			}
			t, err := parseUint(p.val, 8)
			if err != nil || t > 254 {
				return errAt(p.valOff, p.val, "bad table id (want 0 to 254)")
			}
			if uint8(t) <= cx.table {
				return errAt(p.valOff, p.val, "goto_table must go to a later table than %d", cx.table)
			}
			is.gotoTable = int(t)
			continue
		case "clear_actions":
			if err := enter(p, stageClear); err != nil {
				return err
			}
			is.clear = true
			continue
		case "write_metadata":
			if err := enter(p, stageMeta); err != nil {
				return err
			}
			vs, ms, hasMask := splitMask(p.val)
			v, err := parseUintBytes(vs, 8, 64)
			if err != nil {
				return errAt(p.valOff, p.val, "%v", err)
			}
			m := ones(8)
			if hasMask {
				if m, err = parseUintBytes(ms, 8, 64); err != nil {
					return errAt(p.valOff, p.val, "bad mask: %v", err)
				}
			}
			// OVS keeps the value as given, bits outside the mask included.
			is.meta = append(v, m...)
			continue
		case "write_actions":
			if err := enter(p, stageWrite); err != nil {
				return err
			}
			sub, err := cx.nested("write_actions").parseActions(p.val, p.valOff)
			if err != nil {
				return err
			}
			is.write, is.hasWrite = sub.apply, true
			continue
		}
		if stage != stageApply {
			return errAt(p.keyOff, p.text(), "invalid instruction ordering: apply_actions must appear before %s", stageNames[stage])
		}
		if key == "meter" {
			// OVS orders meter as an instruction before apply_actions, even
			// though OpenFlow 1.5 sends it as the first action.
			if meterSeen {
				return errAt(p.keyOff, p.text(), "duplicate meter instruction not allowed")
			}
			if len(is.apply) > 0 {
				return errAt(p.keyOff, p.text(), "invalid instruction ordering: meter must appear before apply_actions")
			}
			meterSeen = true
		}
		apply, err := cx.parseActionTo(is.apply, p, key)
		if err != nil {
			return err
		}
		for _, a := range apply[len(is.apply):] {
			encoded += len(a)
		}
		if encoded > maxListBytes {
			return errLimit(p.keyOff, p.text(), tooLong())
		}
		is.apply = apply
	}
	if drop && n > 0 {
		return errAt(dropTok.keyOff, dropTok.key, "\"drop\" must not be accompanied by any other action or instruction")
	}
	if err := is.checkConjunctions(); err != nil {
		return errAt(base, s, "%v", err)
	}
	return nil
}

// checkConjunctions enforces OVS's rule that conjunction actions stand
// alone, without other actions or instructions.
func (is *instrSet) checkConjunctions() error {
	conj, notes := 0, 0
	for _, a := range is.apply {
		switch {
		case isNX(a, nxastConjunction):
			conj++
		case isNX(a, nxastNote):
			notes++
		}
	}
	others := conj+notes != len(is.apply) || is.clear || is.hasWrite || is.meta != nil || is.gotoTable >= 0
	if conj > 0 && others {
		return fmt.Errorf("\"conjunction\" actions may be used along with \"note\" but not any other kind of action")
	}
	return nil
}

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
	for i := 0; i < len(acts); i++ {
		if s, ok := formatEnqueue(acts[i:]); ok {
			parts = append(parts, s)
			i += 2
			continue
		}
		s, err := formatAction(acts[i])
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
