package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// FlowFilter selects flows the way `ovs-ofctl dump-flows SWITCH FLOWS`
// does without --strict: a flow is selected when it matches every bit the
// filter matches, with the same value (it may match more fields, or more
// bits of one). table=N, cookie=V/M and out_port=P restrict further (P: a
// top-level output action to that port). As in ovs-ofctl, a
// cookie needs a mask (-1: all bits) and priority is refused: a flow stats
// request has none.
type FlowFilter struct {
	table              *uint8
	cookie, cookieMask uint64
	// outPort, when set, wants an output action to that port (OpenFlow
	// 1.1+ numbering) in the flow's apply or write actions; outGroup a
	// group action to that group.
	outPort, outGroup *uint32
	mt                match
}

// ParseFlowFilter parses the match syntax of ovs-ofctl dump-flows, e.g.
// "table=0,ip,nw_dst=10.0.0.0/8". An empty string selects every flow.
func ParseFlowFilter(s string) (*FlowFilter, error) {
	ff := &FlowFilter{}
	var set []setting
	for p, err := range args(s, 0) {
		if err != nil {
			return nil, err
		}
		if p.delim != 0 && p.val == "" {
			return nil, errAt(p.keyOff, p.text(), "%s needs a value", p.key)
		}
		switch p.key {
		case "table":
			if p.val == "all" || p.val == "255" {
				continue
			}
			t, err := parseUint(p.val, 8)
			if err != nil {
				return nil, errAt(p.valOff, p.val, "bad table id (want 0 to 254)")
			}
			tt := uint8(t)
			ff.table = &tt
		case "cookie":
			vs, ms, hasMask := splitMask(p.val)
			if !hasMask {
				return nil, errAt(p.valOff, p.val, "to match on a cookie, specify a mask, e.g. cookie=%s/-1", vs)
			}
			v, err := parseUint(vs, 64)
			if err != nil {
				return nil, errAt(p.valOff, p.val, "bad cookie: %v", err)
			}
			m := ^uint64(0)
			if ms != "-1" {
				if m, err = parseUint(ms, 64); err != nil {
					return nil, errAt(p.valOff, p.val, "bad cookie mask: %v", err)
				}
			}
			ff.cookie, ff.cookieMask = v&m, m
		case "priority":
			return nil, errAt(p.keyOff, p.key, "priority is not part of a non-strict match (ovs-ofctl refuses it too)")
		case "out_port":
			n, err := parsePort(p.val)
			if err != nil {
				return nil, errAt(p.valOff, p.val, "%v", err)
			}
			if n != portNone { // out_port=none: any port, as in ovs-ofctl
				op := port11(n)
				ff.outPort = &op
			}
		case "actions", "action", "out_group":
			return nil, errAt(p.keyOff, p.key, "%s is not supported in a flow filter", p.key)
		default:
			if err := ff.mt.parseMatchPair(p, &set); err != nil {
				return nil, err
			}
		}
	}
	if err := ff.mt.checkPrereqs(set); err != nil {
		return nil, err
	}
	return ff, nil
}

// Match reports whether the encoded FLOW_MOD b (an ADD, as ParseFlow makes
// it) is selected.
func (ff *FlowFilter) Match(b []byte) (bool, error) {
	if len(b) < 56 {
		return false, errors.New("ofctl: flow filter: not a FLOW_MOD")
	}
	if ff.table != nil && b[24] != *ff.table {
		return false, nil
	}
	if binary.BigEndian.Uint64(b[8:])&ff.cookieMask != ff.cookie {
		return false, nil
	}
	mlen := int(binary.BigEndian.Uint16(b[50:]))
	if mlen < 4 || 48+mlen > len(b) {
		return false, errors.New("ofctl: flow filter: bad match")
	}
	fm, err := decodeOXMs(b[52 : 48+mlen])
	if err != nil {
		return false, fmt.Errorf("ofctl: flow filter: %w", err)
	}
	// OVS's cls_rule_is_loose_match: every bit the filter matches, the flow
	// matches too, with the same value.
	for s := range slot(nSlots) {
		fv, fmask := ff.mt.val(s), ff.mt.mask(s)
		v, m := fm.val(s), fm.mask(s)
		for i := range fmask {
			if m[i]&fmask[i] != fmask[i] || v[i]&fmask[i] != fv[i] {
				return false, nil
			}
		}
	}
	if !ff.mt.looseMatchTunMetadata(fm) {
		return false, nil
	}
	return ff.MatchRestrictions(b), nil
}

// OpenFlow 1.5 instruction and action types outputsTo reads.
const (
	instrWriteActions = 3
	instrApplyActions = 4
	actionOutput      = 0
)

// outputsTo reports whether the instructions ins hold an output action to
// port among their apply or write actions (as OVS's out_port reads the top
// level of a flow's actions).
func outputsTo(ins []byte, port uint32) bool { return actsTo(ins, actionOutput, port) }

// actsTo reports whether the instructions ins hold an action of type
// action (output or group: a 32-bit port or group id first) to arg among their
// apply or write actions.
func actsTo(ins []byte, action uint16, arg uint32) bool {
	for len(ins) >= 8 {
		typ, n := binary.BigEndian.Uint16(ins), int(binary.BigEndian.Uint16(ins[2:]))
		if n < 8 || n > len(ins) {
			return false
		}
		if typ == instrApplyActions || typ == instrWriteActions {
			for acts := ins[8:n]; len(acts) >= 8; {
				at, an := binary.BigEndian.Uint16(acts), int(binary.BigEndian.Uint16(acts[2:]))
				if an < 8 || an > len(acts) {
					break
				}
				if at == action && binary.BigEndian.Uint32(acts[4:]) == arg {
					return true
				}
				acts = acts[an:]
			}
		}
		ins = ins[n:]
	}
	return false
}

// looseMatchTunMetadata is the loose match for tun_metadata fields, whose
// filter and flow may have different widths (the filter as ovs-ofctl sends
// it, the flow as the switch holds it): values compare right-aligned, and
// a presence filter (no value) wants the field matched at all.
func (mt *match) looseMatchTunMetadata(flow *match) bool {
	for i, fe := range mt.md {
		e, ok := flow.md[i]
		if !ok {
			return false
		}
		w := max(len(fe.v), len(e.v))
		fm, m := ones(len(fe.v)), ones(len(e.v))
		if fe.masked {
			fm = fe.m
		}
		if e.masked {
			m = e.m
		}
		fv, fmask, v, mask := rightAlign(fe.v, w), rightAlign(fm, w), rightAlign(e.v, w), rightAlign(m, w)
		for j := 0; j < w; j++ {
			if mask[j]&fmask[j] != fmask[j] || v[j]&fmask[j] != fv[j]&fmask[j] {
				return false
			}
		}
	}
	return true
}

// OpenFlow 1.5 numbers a delete or modify FLOW_MOD selects flows by.
const (
	tableAll      = 0xff
	portAny11     = 0xffffffff
	actionGroup   = 22
	flowModFixed  = 48 // through importance; the match follows
	matchHeaderOf = 4
)

// FilterOf is the filter of an encoded OpenFlow 1.5 FLOW_MOD MODIFY or
// DELETE as the switch applies it without the strict flag: its table
// (OFPTT_ALL: every table), cookie and cookie_mask, out_port and out_group
// (ANY: not restricted) and its match, loose as in OVS. The strict
// commands select one identity; their cookie, out_port and out_group
// restrict as here.
func FilterOf(fm []byte) (*FlowFilter, error) {
	if len(fm) < flowModFixed+8 {
		return nil, errors.New("ofctl: flow filter: not a FLOW_MOD")
	}
	mlen := int(binary.BigEndian.Uint16(fm[50:]))
	if mlen < matchHeaderOf || flowModFixed+mlen > len(fm) {
		return nil, errors.New("ofctl: flow filter: bad match")
	}
	mt, err := decodeOXMs(fm[52 : flowModFixed+mlen])
	if err != nil {
		return nil, fmt.Errorf("ofctl: flow filter: %w", err)
	}
	ff := &FlowFilter{mt: *mt}
	if t := fm[24]; t != tableAll {
		ff.table = &t
	}
	ff.cookieMask = binary.BigEndian.Uint64(fm[16:])
	ff.cookie = binary.BigEndian.Uint64(fm[8:]) & ff.cookieMask
	if p := binary.BigEndian.Uint32(fm[36:]); p != portAny11 {
		ff.outPort = &p
	}
	if g := binary.BigEndian.Uint32(fm[40:]); g != groupAny {
		ff.outGroup = &g
	}
	return ff, nil
}

// Restricts reports whether the filter selects by more than identity:
// a cookie, an out_port or an out_group.
func (ff *FlowFilter) Restricts() bool {
	return ff.cookieMask != 0 || ff.outPort != nil || ff.outGroup != nil
}

// MatchRestrictions is Match without the match fields and table: whether
// the flow b passes the filter's cookie, out_port and out_group (what
// restricts a strict modify or delete).
func (ff *FlowFilter) MatchRestrictions(b []byte) bool {
	if len(b) < 56 || binary.BigEndian.Uint64(b[8:])&ff.cookieMask != ff.cookie {
		return false
	}
	mlen := int(binary.BigEndian.Uint16(b[50:]))
	if mlen < matchHeaderOf || flowModFixed+mlen > len(b) {
		return false
	}
	ins := b[flowModFixed+(mlen+7)/8*8:]
	return (ff.outPort == nil || outputsTo(ins, *ff.outPort)) && (ff.outGroup == nil || actsTo(ins, actionGroup, *ff.outGroup))
}
