package ofctl

import (
	"encoding/binary"
	"fmt"
)

// OVS's limits on action lists.
//
// vswitchd keeps actions in its own form (struct ofpact, lib/ofp-actions.c),
// which is larger than the OpenFlow encoding for some actions: a learn spec
// of 14 bytes on the wire takes 40, a register set_field of 16 takes 32. An
// action that holds others (clone, ct, write_actions) or a variable part
// (learn's specs, note's bytes) records its own length in 16 bits, and
// ofpact_finish asserts it fits: a flow whose clone or learn passes 65,535
// bytes there is accepted on the wire and then aborts vswitchd while it
// decodes the flow, at every start that replays it. ovs-ofctl refuses the
// same flow when it parses it ("input too big"), and also refuses an action
// list whose own internal form passes 65,535 bytes, and actions nested more
// than MAX_OFPACT_PARSE_DEPTH deep ("Action nested too deeply").
//
// The parser (instrSet.checkLimits, checkBucketLimits, and the depth of
// actx) and CheckInstructions and CheckActions, for encoded entries, apply
// all three, computing the internal size of each action from its encoding
// with OVS 3.1's struct sizes on 64-bit hosts (TestLimitsAsOVSOfctl holds
// the figures to ovs-ofctl's own refusals, TestLimitsOnSwitch to
// vswitchd). Where an action's internal form is not known, it counts three
// times its encoding, more than any known action takes; encap's properties
// (counted twice) and controller's userdata are bounded from above by
// their encoding.
const (
	// MaxActionDepth is OVS's MAX_OFPACT_PARSE_DEPTH: the top-level action
	// list and the lists nested in it are at most this many levels.
	MaxActionDepth = 100
	// MaxOfpactLen is the most bytes one action, or one action list, may
	// take in vswitchd's internal form (UINT16_MAX).
	MaxOfpactLen = 0xffff
)

// Sizes of OVS 3.1's internal action structs (x86_64), as the encodings
// that carry them map to them.
const (
	ofpactNest      = 8  // struct ofpact_nest: clone, write_actions
	ofpactCT        = 32 // struct ofpact_conntrack
	ofpactLearn     = 48 // struct ofpact_learn
	ofpactLearnSpec = 40 // struct ofpact_learn_spec
	ofpactSetField  = 16 // struct ofpact_set_field, before value and mask
	ofpactNote      = 16 // struct ofpact_note, before the bytes
	ofpactCntIDs    = 8  // struct ofpact_cnt_ids, before the ids
	ofpactBundle    = 40 // struct ofpact_bundle, before the members
	ofpactCtl       = 24 // struct ofpact_controller, before the userdata
	ofpactEncap     = 16 // struct ofpact_encap, before the properties
	unknownFactor   = 3  // an action whose internal form is not known
	tunMetadataMax  = 124
	nxLearnSrcImm   = 1 << 13
	nxLearnDstMask  = 3 << 11
	nxLearnDstOut   = 2 << 11
	nxLearnNBits    = 0x3ff
	nxLearnFWrite   = 1 << 2 // NX_LEARN_F_WRITE_RESULT
	learnFixed      = 32     // struct nx_action_learn
	learn2Fixed     = 40     // struct nx_action_learn2
	ctFixed         = 24     // struct nx_action_conntrack
	cloneFixed      = 16     // struct ext_action_header
)

// ofpactFixed is the internal size of the actions whose size does not
// depend on their contents, by OpenFlow action type (0: not such an
// action); nxOfpactFixed the same by Nicira subtype.
var ofpactFixed = [30]uint8{
	ofpatOutput: 16, 1: 8, 2: 8, 3: 16, 4: 16, 5: 8, 6: 8, 7: 8, 8: 8, 9: 8, 10: 8,
	13: 8, 14: 8, ofpatSetMplsTTL: 8, ofpatDecMplsTTL: 8, ofpatPushVLAN: 8, ofpatPopVLAN: 8,
	ofpatPushMpls: 8, ofpatPopMpls: 8, ofpatSetQueue: 8, ofpatGroup: 8, ofpatSetNwTTL: 8,
	ofpatDecNwTTL: 16, ofpatCopyField: 40, ofpatMeter: 16,
}

var nxOfpactFixed = [256]uint8{
	nxastResubmit: 16, 2: 16, 4: 8, nxastPopQueue: 8, 6: 40, 9: 16, nxastMultipath: 40,
	nxastResubmitTable: 16, nxastOutputReg: 24, nxastExit: 8, 18: 16, nxastFinTimeout: 8,
	nxastController: 24, 22: 24, nxastStackPush: 24, nxastStackPop: 24, nxastSample: 32,
	nxastOutputReg2: 24, nxastConjunction: 16, nxastNAT: 48, nxastSample2: 32,
	nxastOutputTrunc: 16, nxastSample3: 32, nxastCTClear: 8, nxastResubmitCT: 16,
	nxastDecap: 8, nxastDecNshTTL: 8, nxastCheckPktLarger: 32, nxastDelete: 16, 254: 8, 255: 8,
}

// LimitError is the refusal of an action list OVS cannot take: Limit names
// the limit as ovs-ofctl does ("input too big", "action nested too
// deeply"), Detail says where and by how much.
type LimitError struct {
	Limit  string
	Detail string
}

func (e *LimitError) Error() string { return "ofctl: " + e.text() }

// text is the error without the package's prefix, for a SyntaxError.
func (e *LimitError) text() string { return e.Limit + ": " + e.Detail }

// Limit names.
const (
	limitTooBig = "input too big"
	limitDeep   = "action nested too deeply"
)

func tooDeep() *LimitError {
	return &LimitError{Limit: limitDeep, Detail: fmt.Sprintf("more than %d levels of nested action lists (OVS's MAX_OFPACT_PARSE_DEPTH)", MaxActionDepth)}
}

// maxListBytes is the most bytes an encoded action list can take: one
// OpenFlow message holds it.
const maxListBytes = 0xffff

func tooLong() *LimitError {
	return &LimitError{Limit: limitTooBig, Detail: fmt.Sprintf("the actions encode to more than the %d bytes of an OpenFlow message", maxListBytes)}
}

// What vswitchd 3.1 does with an encoded flow past a size limit.
const (
	vswitchdAborts  = "ovs-ofctl refuses it; vswitchd aborts on it"
	vswitchdRefuses = "ovs-ofctl refuses it; so does vswitchd"
	ofctlRefuses    = "ovs-ofctl refuses it and could not read it back"
)

func tooBig(what string, n int, then string) *LimitError {
	return &LimitError{Limit: limitTooBig, Detail: fmt.Sprintf("%s takes %d bytes in vswitchd's internal form, more than the %d it can hold (%s)",
		what, n, MaxOfpactLen, then)}
}

// CheckInstructions checks the instructions of an encoded OpenFlow 1.5
// FLOW_MOD (the bytes after its match) against OVS's limits on actions,
// before anything else looks at them: the walk is linear in their length.
// Malformed lengths are left to the decoders that follow.
func CheckInstructions(b []byte) error {
	total := 0
	for len(b) >= 8 {
		typ, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if n < 8 || n > len(b) {
			return nil
		}
		switch typ {
		case 3, 4: // write_actions, apply_actions
			level := 1
			if typ == 3 {
				level = 2 // its list is nested in the flow's
			}
			l, err := listOfpactLen(b[8:n], level)
			if err != nil {
				return err
			}
			if typ == 3 {
				if l += ofpactNest; l > MaxOfpactLen {
					return tooBig("write_actions", l, vswitchdRefuses)
				}
			}
			total += l
		case 2: // write_metadata
			total += 24
		default: // goto_table, clear_actions, and what OVS refuses anyway
			total += 8
		}
		b = b[n:]
	}
	if total > MaxOfpactLen {
		return tooBig("the action list", total, ofctlRefuses)
	}
	return nil
}

// CheckActions checks an encoded action list that stands alone (a group
// bucket's) against OVS's limits on actions.
func CheckActions(b []byte) error {
	l, err := listOfpactLen(b, 1)
	if err == nil && l > MaxOfpactLen {
		err = tooBig("the action list", l, ofctlRefuses)
	}
	return err
}

// checkParsed checks what parseActionsTo made of a flow's action list.
func (is *instrSet) checkLimits() error {
	total := 0
	for _, a := range is.apply {
		l, err := ofpactLen(a, 1)
		if err != nil {
			return err
		}
		total += l
	}
	if is.hasWrite {
		w := ofpactNest
		for _, a := range is.write {
			l, err := ofpactLen(a, 2)
			if err != nil {
				return err
			}
			w += l
		}
		if w > MaxOfpactLen {
			return tooBig("write_actions", w, vswitchdRefuses)
		}
		total += w
	}
	if is.clear {
		total += 8
	}
	if is.meta != nil {
		total += 24
	}
	if is.gotoTable >= 0 {
		total += 8
	}
	if total > MaxOfpactLen {
		return tooBig("the action list", total, ofctlRefuses)
	}
	return nil
}

// checkBucketLimits checks a parsed bucket's actions.
func checkBucketLimits(acts [][]byte) error {
	total := 0
	for _, a := range acts {
		l, err := ofpactLen(a, 1)
		if err != nil {
			return err
		}
		total += l
	}
	if total > MaxOfpactLen {
		return tooBig("the bucket's action list", total, ofctlRefuses)
	}
	return nil
}

// listOfpactLen returns the internal size of the action list b at nesting
// level (the top-level list is 1), checking every action in it.
func listOfpactLen(b []byte, level int) (int, error) {
	if level > MaxActionDepth {
		return 0, tooDeep()
	}
	total := 0
	for len(b) >= 8 {
		n := int(binary.BigEndian.Uint16(b[2:]))
		if n < 8 || n > len(b) {
			break // malformed: the decoders refuse it
		}
		l, err := ofpactLen(b[:n], level)
		if err != nil {
			return 0, err
		}
		total += l
		b = b[n:]
	}
	return total, nil
}

// ofpactLen returns the internal size of the encoded action a in a list at
// nesting level, padded as OVS pads it, after checking the lists nested in
// it and its own length against MaxOfpactLen.
func ofpactLen(a []byte, level int) (int, error) {
	typ := binary.BigEndian.Uint16(a)
	if typ == ofpatSetField {
		return setFieldOfpactLen(a), nil
	}
	if typ != ofpatVendor || len(a) < 10 || binary.BigEndian.Uint32(a[4:]) != nxVendor {
		if int(typ) < len(ofpactFixed) && ofpactFixed[typ] != 0 {
			return int(ofpactFixed[typ]), nil
		}
		return unknownFactor * len(a), nil
	}
	sub := binary.BigEndian.Uint16(a[8:])
	if int(sub) < len(nxOfpactFixed) && nxOfpactFixed[sub] != 0 {
		return int(nxOfpactFixed[sub]), nil
	}
	var l int
	switch sub {
	case nxastClone, nxastCT:
		fixed, hdr, name := cloneFixed, ofpactNest, "clone"
		if sub == nxastCT {
			fixed, hdr, name = ctFixed, ofpactCT, "ct"
		}
		if len(a) < fixed {
			return unknownFactor * len(a), nil
		}
		inner, err := listOfpactLen(a[fixed:], level+1)
		if err != nil {
			return 0, err
		}
		if l = hdr + inner; l > MaxOfpactLen {
			return 0, tooBig(name+" with its nested actions", l, vswitchdAborts)
		}
		return l, nil
	case nxastLearn, nxastLearn2:
		var specs int
		l, specs = learnOfpactLen(a, sub == nxastLearn2)
		if l > MaxOfpactLen {
			return 0, tooBig(fmt.Sprintf("learn with %d specs", specs), l, vswitchdAborts)
		}
		return l, nil
	case nxastNote:
		l = ofpactNote + len(a) - 10
	case nxastBundle, nxastBundleLoad:
		if len(a) < 22 {
			return unknownFactor * len(a), nil
		}
		l = ofpactBundle + 2*int(binary.BigEndian.Uint16(a[20:]))
	case nxastDecTTLCntIDs:
		if len(a) < 12 {
			return unknownFactor * len(a), nil
		}
		l = ofpactCntIDs + 2*int(binary.BigEndian.Uint16(a[10:]))
	case nxastController2:
		l = ofpactCtl + len(a) - 16 // the userdata is at most the properties
	case nxastEncap:
		l = ofpactEncap + 2*(len(a)-16)
	case 7, 33: // reg_load, reg_load2 (OpenFlow 1.0 to 1.4 only)
		l = ofpactSetField + 2*pad8Up(tunMetadataMax)
	default:
		return unknownFactor * len(a), nil
	}
	if l > MaxOfpactLen {
		return 0, tooBig(fmt.Sprintf("NXAST action %d", sub), l, vswitchdAborts)
	}
	return pad8Up(l), nil
}

// setFieldOfpactLen is the internal size of a set_field: the struct, then
// the field's value and mask, each as wide as OVS's field (for tun_metadata,
// as wide as it may be mapped).
func setFieldOfpactLen(a []byte) int {
	if len(a) < 8 {
		return unknownFactor * len(a)
	}
	h := binary.BigEndian.Uint32(a[4:])
	class, field, masked, n := h>>16, h>>9&0x7f, h&0x100 != 0, int(h&0xff)
	if class == 0xffff {
		n -= 4 // the experimenter id
	}
	if masked {
		n /= 2
	}
	if class == 1 && field >= 40 && field < 104 { // NXM_NX_TUN_METADATA0..63
		n = tunMetadataMax
	}
	if n < 0 {
		n = 0
	}
	return ofpactSetField + 2*pad8Up(n)
}

// learnOfpactLen returns the internal size of an encoded learn (or learn2)
// action and the number of its specs, walking them as OVS's
// decode_LEARN_specs does; a spec that runs past the action ends the walk
// (vswitchd refuses the action).
func learnOfpactLen(a []byte, learn2 bool) (l, specs int) {
	l = ofpactLearn
	p := learnFixed
	if learn2 {
		p = learn2Fixed
		if len(a) >= 32 && binary.BigEndian.Uint16(a[24:])&nxLearnFWrite != 0 {
			p += fieldRefLen(a, p) - 2 // a header without an offset
		}
	}
	for p+2 <= len(a) {
		h := int(binary.BigEndian.Uint16(a[p:]))
		if h == 0 {
			break
		}
		p += 2
		nbits := h & nxLearnNBits
		l += ofpactLearnSpec
		specs++
		if h&nxLearnSrcImm != 0 {
			p += 2 * ((nbits + 15) / 16)
			l += pad8Up((nbits + 7) / 8)
		} else {
			p += fieldRefLen(a, p)
		}
		if h&nxLearnDstMask != nxLearnDstOut {
			p += fieldRefLen(a, p)
		}
	}
	return l, specs
}

// fieldRefLen is the length of the field header and 16-bit offset at a[p:]:
// 6 bytes, or 10 for an experimenter field.
func fieldRefLen(a []byte, p int) int {
	if p+2 <= len(a) && binary.BigEndian.Uint16(a[p:]) == 0xffff {
		return 10
	}
	return 6
}

func pad8Up(n int) int { return (n + 7) &^ 7 }

// leafParens bounds the parentheses an action list of MaxActionDepth levels
// may hold beyond one per level: ct(exec(...)) opens two for its list, and
// an action that holds no list opens up to three (encap(nsh(tlv(...)))).
const leafParens = 8

// checkNesting refuses text whose parentheses are nested deeper than
// MaxActionDepth levels of action lists can need, in one pass and before
// anything is parsed, and returns an index of the parentheses of a long
// text for its scanners: the parser's work is then linear in the text.
func checkNesting(s string, base int) (*parenIndex, error) {
	d, deepest := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			if d++; d > MaxActionDepth+leafParens {
				return nil, errLimit(base+i, s[i:], tooDeep())
			}
			deepest = max(deepest, d)
		case ')':
			d--
		}
	}
	if len(s) < parenIndexMin || deepest < 2 {
		return nil, nil // a value is scanned at most twice
	}
	return indexParens(s, base), nil
}
