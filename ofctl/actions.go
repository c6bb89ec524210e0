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
