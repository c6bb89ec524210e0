package ofctl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
)

// DecodeFlowMod decodes an encoded OpenFlow 1.5 FLOW_MOD without
// interpreting match values or actions it does not need to: the result
// marshals back to the same bytes (header xid included) and prints with
// FormatFlow. Output, group and meter actions come back as libOpenflow's
// ActionOutput, ActionGroup and ActionMeter, other actions as opaque values.
// Unlike libOpenflow's FlowMod.UnmarshalBinary it never loses fields and
// never panics.
func DecodeFlowMod(b []byte) (*openflow15.FlowMod, error) {
	if len(b) < 56 || b[0] != openflow15.VERSION || b[1] != openflow15.Type_FlowMod {
		return nil, errors.New("ofctl: decode flow mod: not an OpenFlow 1.5 FLOW_MOD")
	}
	if n := int(binary.BigEndian.Uint16(b[2:])); n != len(b) {
		return nil, fmt.Errorf("ofctl: decode flow mod: length field %d, message %d bytes", n, len(b))
	}
	mlen := int(binary.BigEndian.Uint16(b[50:]))
	mend := 48 + (mlen+7)/8*8
	if binary.BigEndian.Uint16(b[48:]) != openflow15.MatchType_OXM || mlen < 4 || mend > len(b) {
		return nil, errors.New("ofctl: decode flow mod: bad match")
	}
	fields, err := splitOXMs(b[52 : 48+mlen])
	if err != nil {
		return nil, fmt.Errorf("ofctl: decode flow mod: %w", err)
	}
	ins, err := splitInstructions(b[mend:])
	if err != nil {
		return nil, fmt.Errorf("ofctl: decode flow mod: %w", err)
	}
	if (b[25] == openflow15.FC_DELETE || b[25] == openflow15.FC_DELETE_STRICT) && len(ins) > 0 {
		// libOpenflow leaves a delete's instructions out of its length but
		// not out of its bytes, so it cannot re-encode this message.
		return nil, errors.New("ofctl: decode flow mod: delete with instructions")
	}
	fm := openflow15.NewFlowMod()
	fm.Header.Xid = binary.BigEndian.Uint32(b[4:])
	fm.Cookie = binary.BigEndian.Uint64(b[8:])
	fm.CookieMask = binary.BigEndian.Uint64(b[16:])
	fm.TableId, fm.Command = b[24], b[25]
	fm.IdleTimeout = binary.BigEndian.Uint16(b[26:])
	fm.HardTimeout = binary.BigEndian.Uint16(b[28:])
	fm.Priority = binary.BigEndian.Uint16(b[30:])
	fm.BufferId = binary.BigEndian.Uint32(b[32:])
	fm.OutPort = binary.BigEndian.Uint32(b[36:])
	fm.OutGroup = binary.BigEndian.Uint32(b[40:])
	fm.Flags = binary.BigEndian.Uint16(b[44:])
	fm.Importance = binary.BigEndian.Uint16(b[46:])
	fm.Match = buildMatch(fields)
	fm.Instructions = ins
	return fm, nil
}

// libAction wraps an encoded action: as libOpenflow's own type for output,
// group and meter (whose encodings it reproduces exactly), so callers can
// inspect them, and as an opaque action otherwise.
func libAction(b []byte) openflow15.Action {
	typ, n := binary.BigEndian.Uint16(b), len(b)
	switch {
	case typ == ofpatOutput && n == 16 && isZero(b[10:16]):
		a := openflow15.NewActionOutput(binary.BigEndian.Uint32(b[4:]))
		a.MaxLen = binary.BigEndian.Uint16(b[8:])
		return a
	case typ == ofpatGroup && n == 8:
		return openflow15.NewActionGroup(binary.BigEndian.Uint32(b[4:]))
	case typ == ofpatMeter && n == 8:
		return openflow15.NewActionMeter(binary.BigEndian.Uint32(b[4:]))
	}
	return newRawAction(b)
}

// splitOXMs splits encoded OXM fields without interpreting their values.
func splitOXMs(b []byte) ([]oxm, error) {
	var out []oxm
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, errors.New("truncated match field")
		}
		h := oxmHdr{uint32(binary.BigEndian.Uint16(b)), b[2] >> 1}
		masked, n := b[2]&1 != 0, int(b[3])
		if len(b) < 4+n {
			return nil, fmt.Errorf("truncated match field %#04x:%d", h.class, h.field)
		}
		body := b[4 : 4+n]
		b = b[4+n:]
		if h.class == 0xffff {
			var err error
			if h, body, err = pullExperimenter(h.field, body); err != nil {
				return nil, err
			}
		}
		if masked && len(body)%2 != 0 {
			return nil, fmt.Errorf("bad masked match field %#04x:%d", h.class, h.field)
		}
		f := oxm{hdr: h, v: append([]byte(nil), body...)}
		if masked {
			f.v, f.m = f.v[:len(body)/2], f.v[len(body)/2:]
		}
		out = append(out, f)
	}
	return out, nil
}

// splitInstructions rebuilds libOpenflow instructions around raw actions.
func splitInstructions(b []byte) ([]openflow15.Instruction, error) {
	var out []openflow15.Instruction
	for len(b) > 0 {
		if len(b) < 8 {
			return nil, errors.New("truncated instruction")
		}
		typ, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if n < 8 || n%8 != 0 || n > len(b) {
			return nil, fmt.Errorf("bad instruction length %d", n)
		}
		body := b[:n]
		b = b[n:]
		switch typ {
		case openflow15.InstrType_GOTO_TABLE:
			out = append(out, openflow15.NewInstrGotoTable(body[4]))
		case openflow15.InstrType_WRITE_METADATA:
			if n != 24 {
				return nil, errors.New("bad write_metadata length")
			}
			out = append(out, openflow15.NewInstrWriteMetadata(binary.BigEndian.Uint64(body[8:]), binary.BigEndian.Uint64(body[16:])))
		case openflow15.InstrType_APPLY_ACTIONS, openflow15.InstrType_WRITE_ACTIONS, openflow15.InstrType_CLEAR_ACTIONS:
			in := openflow15.NewInstrApplyActions()
			in.Type = typ
			acts, err := splitActions(body[8:])
			if err != nil {
				return nil, err
			}
			for _, a := range acts {
				_ = in.AddAction(libAction(append([]byte(nil), a...)), false)
			}
			out = append(out, in)
		default:
			return nil, fmt.Errorf("unsupported instruction type %d", typ)
		}
	}
	return out, nil
}
