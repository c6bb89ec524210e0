package canon

import (
	"fmt"

	"github.com/flowstate-io/flowstate/ofctl"
)

// OpenFlow 1.5 FLOW_MOD layout and instruction types (OFPIT_*).
const (
	flowModFixed      = 48
	instrGotoTable    = 1
	instrWriteMeta    = 2
	instrWriteActions = 3
	instrApplyActions = 4
	instrClearActions = 5
)

// instrOrder is the order OVS encodes instructions in (ofpact order:
// apply_actions, clear_actions, write_actions, write_metadata, goto_table).
var instrOrder = []uint16{instrApplyActions, instrClearActions, instrWriteActions, instrWriteMeta, instrGotoTable}

// canonicalFlow returns the canonical FLOW_MOD of an encoded one that passed
// entry.Identify, rebuilt field by field: the header as a dump rebuilds it,
// the match re-encoded, the instructions in OVS's order with each action
// canonical where ofctl knows it. It is not printed and parsed back whole:
// the printer shows what OVS shows, which is not always all OVS keeps (an
// output's max_len), and one action it does not know would make the whole
// flow unprintable.
func canonicalFlow(b []byte, kept *bool) ([]byte, error) {
	mlen := int(be.Uint16(b[flowModFixed+2:]))
	if be.Uint16(b[flowModFixed:]) != 1 { // OFPMT_OXM
		return nil, fmt.Errorf("match type %d, want OXM (1)", be.Uint16(b[flowModFixed:]))
	}
	match, err := ofctl.CanonicalMatch(b[flowModFixed+4 : flowModFixed+mlen])
	if err != nil {
		return nil, err
	}
	instrs, err := canonicalInstructions(b[flowModFixed+pad8(mlen):], match, b[24], kept)
	if err != nil {
		return nil, err
	}
	out := make([]byte, flowModFixed, flowModFixed+4+len(match)+8+len(instrs))
	copy(out, b[:flowModFixed])
	be.PutUint32(out[4:], 0)         // xid
	be.PutUint64(out[16:], 0)        // cookie_mask: meaningless for ADD
	be.PutUint32(out[36:], portAny)  // out_port
	be.PutUint32(out[40:], groupAny) // out_group
	out = be.AppendUint16(out, 1)    // OFPMT_OXM
	out = be.AppendUint16(out, uint16(4+len(match)))
	out = append(out, match...)
	out = append(out, make([]byte, pad8(4+len(match))-4-len(match))...)
	out = append(out, instrs...)
	if len(out) > MaxMessage {
		return nil, fmt.Errorf("FLOW_MOD of %d bytes exceeds the %d-byte limit", len(out), MaxMessage)
	}
	be.PutUint16(out[2:], uint16(len(out)))
	return out, nil
}

// canonicalInstructions re-encodes an instruction list as OVS does.
func canonicalInstructions(b []byte, match []byte, table uint8, kept *bool) ([]byte, error) {
	byType := map[uint16][]byte{}
	for len(b) > 0 {
		if len(b) < 8 {
			return nil, fmt.Errorf("truncated instruction (%d bytes)", len(b))
		}
		typ, n := be.Uint16(b), int(be.Uint16(b[2:]))
		if n < 8 || n%8 != 0 || n > len(b) {
			return nil, fmt.Errorf("instruction type %d: length %d (want a multiple of 8, at most the %d bytes left)", typ, n, len(b))
		}
		if _, dup := byType[typ]; dup {
			return nil, fmt.Errorf("instruction type %d given twice: OVS refuses it (OFPBIC_DUP_INST)", typ)
		}
		byType[typ] = b[:n]
		b = b[n:]
	}
	var out []byte
	for typ := range byType {
		switch typ {
		case instrGotoTable, instrWriteMeta, instrWriteActions, instrApplyActions, instrClearActions:
		default:
			return nil, fmt.Errorf("instruction type %d: OVS takes goto_table, write_metadata, write_actions, apply_actions and clear_actions in OpenFlow 1.5", typ)
		}
	}
	cx, err := ofctl.FlowActions(match, table)
	if err != nil {
		return nil, err
	}
	for _, typ := range instrOrder {
		in, ok := byType[typ]
		if !ok {
			continue
		}
		switch typ {
		case instrApplyActions, instrWriteActions:
			acx := cx
			if typ == instrWriteActions {
				acx = cx.WriteActions()
			}
			acts, err := canonicalActions(in[8:], acx, kept)
			if err != nil {
				return nil, fmt.Errorf("instruction type %d: %w", typ, err)
			}
			if len(acts) == 0 {
				continue // OVS keeps no empty action list
			}
			h := make([]byte, 8)
			be.PutUint16(h, typ)
			be.PutUint16(h[2:], uint16(8+len(acts)))
			out = append(append(out, h...), acts...)
		case instrClearActions:
			out = append(out, 0, instrClearActions, 0, 8, 0, 0, 0, 0)
		case instrWriteMeta:
			if len(in) != 24 {
				return nil, fmt.Errorf("write_metadata of %d bytes, want 24", len(in))
			}
			out = append(out, 0, instrWriteMeta, 0, 24, 0, 0, 0, 0)
			out = append(out, in[8:24]...) // OVS keeps the value as given
		case instrGotoTable:
			if len(in) != 8 {
				return nil, fmt.Errorf("goto_table of %d bytes, want 8", len(in))
			}
			if in[4] <= table {
				return nil, fmt.Errorf("goto_table:%d from table %d: OVS only goes to a later table (OFPBIC_BAD_TABLE_ID)", in[4], table)
			}
			out = append(out, 0, instrGotoTable, 0, 8, in[4], 0, 0, 0)
		}
	}
	return out, nil
}

func pad8(n int) int { return (n + 7) &^ 7 }
