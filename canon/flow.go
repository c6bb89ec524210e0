package canon

import (
	"fmt"
	"slices"
	"sync"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
)

// OpenFlow 1.5 FLOW_MOD layout and instruction types (OFPIT_*).
const (
	flowModFixed      = entry.FlowModFixed
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
	return canonicalFlowCached(b, kept, caches)
}

// flowCaches are the caches canonicalising a flow goes through; a nil one
// is not used.
type flowCaches struct {
	lists   *listCache // whole action lists
	actions *listCache // single actions, for lists seen once
}

// caches are the caches of canonicalFlow.
var caches = flowCaches{lists: newListCache(), actions: newListCache()}

// flowScratch is what canonicalising a flow needs beyond its result,
// pooled: a decoded match is kilobytes.
type flowScratch struct {
	fm  ofctl.FlowMatch
	key []byte
	am  actionMemo
}

var flowScratches = sync.Pool{New: func() any { return new(flowScratch) }}

// canonicalFlowCached is canonicalFlow through the given caches.
func canonicalFlowCached(b []byte, kept *bool, cache flowCaches) ([]byte, error) {
	mtype, mlen := entry.FlowModMatchHeader(b)
	if mtype != 1 { // OFPMT_OXM
		return nil, fmt.Errorf("match type %d, want OXM (1)", mtype)
	}
	sc := flowScratches.Get().(*flowScratch)
	defer flowScratches.Put(sc)
	out := make([]byte, flowModFixed+4, len(b)+16)
	copy(out, b[:flowModFixed])
	out, err := sc.fm.Canonical(out, b[flowModFixed+4:flowModFixed+mlen], entry.FlowModTable(b))
	if err != nil {
		return nil, err
	}
	n := len(out) - flowModFixed // ofp_match length, header included
	out = append(out, make([]byte, pad8(n)-n)...)
	// OVS's limits on actions, first as sent (a list nested too deep costs
	// the canonicaliser more than the check), then as it will be sent.
	instr := b[flowModFixed+pad8(mlen):]
	if err := ofctl.CheckInstructions(instr); err != nil {
		return nil, err
	}
	ins := len(out)
	out, err = canonicalInstructions(out, instr, entry.FlowModTable(b), kept, sc, cache)
	if err != nil {
		return nil, err
	}
	if err := ofctl.CheckInstructions(out[ins:]); err != nil {
		return nil, err
	}
	entry.ClearFlowModRequest(out)
	entry.SetFlowModMatchHeader(out, n)
	if len(out) > MaxMessage {
		return nil, fmt.Errorf("FLOW_MOD of %d bytes exceeds the %d-byte limit", len(out), MaxMessage)
	}
	entry.SetLength(out)
	return out, nil
}

// instrTypes is the number of instruction types OVS takes (1 to 5).
const instrTypes = instrClearActions + 1

// canonicalInstructions appends an instruction list re-encoded as OVS
// does to out; sc.fm holds the flow's match.
func canonicalInstructions(out, b []byte, table uint8, kept *bool, sc *flowScratch, cache flowCaches) ([]byte, error) {
	var byType [instrTypes][]byte
	var others []uint16 // types OVS does not take, to report and to find twice
	for len(b) > 0 {
		if len(b) < 8 {
			return nil, fmt.Errorf("truncated instruction (%d bytes)", len(b))
		}
		typ, n := be.Uint16(b), int(be.Uint16(b[2:]))
		if n < 8 || n%8 != 0 || n > len(b) {
			return nil, fmt.Errorf("instruction type %d: length %d (want a multiple of 8, at most the %d bytes left)", typ, n, len(b))
		}
		known := typ >= instrGotoTable && typ <= instrClearActions
		if known && byType[typ] != nil || !known && slices.Contains(others, typ) {
			return nil, fmt.Errorf("instruction type %d given twice: OVS refuses it (OFPBIC_DUP_INST)", typ)
		}
		if known {
			byType[typ] = b[:n]
		} else {
			others = append(others, typ)
		}
		b = b[n:]
	}
	if len(others) > 0 {
		return nil, fmt.Errorf("instruction type %d: OVS takes goto_table, write_metadata, write_actions, apply_actions and clear_actions in OpenFlow 1.5", others[0])
	}
	// write_actions are checked in the context the apply_actions leave
	// (a push_vlan's header): a flow whose write_actions need the context
	// has both computed in order, without the list cache (single actions
	// are keyed by the context at each).
	if w := byType[instrWriteActions]; w != nil && !allExact(w[8:]) {
		cache.lists = nil
	}
	var cx *ofctl.ActionContext // made when first needed
	for _, typ := range instrOrder {
		in := byType[typ]
		if in == nil {
			continue
		}
		switch typ {
		case instrApplyActions, instrWriteActions:
			h := len(out)
			out = append(out, 0, 0, 0, 0, 0, 0, 0, 0)
			var err error
			out, err = appendInstrActions(out, in[8:], typ, &cx, kept, sc, cache)
			if err != nil {
				return nil, fmt.Errorf("instruction type %d: %w", typ, err)
			}
			if len(out) == h+8 {
				out = out[:h] // OVS keeps no empty action list
				continue
			}
			be.PutUint16(out[h:], typ)
			be.PutUint16(out[h+2:], uint16(len(out)-h))
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

// appendInstrActions appends the canonical form of the actions of an
// apply_actions or write_actions instruction to out, from cache when it
// can. *cx is the flow's apply_actions context, made on first use.
func appendInstrActions(out, acts []byte, typ uint16, cx **ofctl.ActionContext, kept *bool, sc *flowScratch, caches flowCaches) ([]byte, error) {
	if allExact(acts) {
		return appendCanonicalActions(out, acts, nil, kept, nil) // no context, no need for a cache
	}
	cache := caches.lists
	var h uint64
	if cache != nil {
		sc.key = append(sc.key[:0], byte(typ))
		sc.key = sc.fm.AppendActionKey(sc.key)
		sc.key = append(sc.key, acts...)
		h = cache.hash(sc.key)
		if l, ok := cache.lookup(h, sc.key); ok {
			*kept = *kept || l.kept
			return append(out, l.acts...), nil
		}
	}
	if *cx == nil {
		*cx = sc.fm.Actions()
	}
	acx := *cx
	if typ == instrWriteActions {
		acx = acx.WriteActions()
	}
	start, listKept := len(out), false
	var am *actionMemo
	if caches.actions != nil {
		am = &sc.am
		am.start(caches.actions)
	}
	out, err := appendCanonicalActions(out, acts, acx, &listKept, am)
	if err != nil {
		return nil, err
	}
	*kept = *kept || listKept
	if cache != nil {
		cache.offer(h, sc.key, out[start:], listKept)
	}
	return out, nil
}

func pad8(n int) int { return (n + 7) &^ 7 }
