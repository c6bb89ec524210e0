package ofconn

import (
	"context"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
)

// The decoded flow dump serves only tests (which compare dumped flows with
// what they sent, field by field): production reads flows raw
// (DumpFlowsRaw, EachFlow), which saves the decode.

// DumpFlows returns every flow of every table.
func (c *Conn) DumpFlows(ctx context.Context) ([]Flow, error) {
	req := openflow15.NewFlowStatsRequest()
	req.TableId = openflow15.OFPTT_ALL // the default, table 0, would miss every other table
	var flows []Flow
	err := c.multipart(ctx, openflow15.MultipartType_FlowDesc, req, minFlowDesc, func(raw []byte) error {
		flows = append(flows, decodeFlow(raw))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ofconn: dump flows: %w", err)
	}
	return flows, nil
}

// decodeFlow decodes one ofp_flow_desc entry of at least minFlowDesc bytes. It never panics.
func decodeFlow(raw []byte) Flow {
	fail := func(err error) Flow {
		return Flow{Raw: raw, Err: fmt.Errorf("ofconn: undecodable flow (table %d, priority %d): %w", raw[4], be.Uint16(raw[6:8]), err)}
	}
	if n := int(be.Uint16(raw[flowDescFixed+2:])); n < 4 || flowDescFixed+(n+7)/8*8 > len(raw) {
		return fail(fmt.Errorf("entry of %d bytes has a match of %d", len(raw), n))
	}
	fd := openflow15.NewFlowDesc()
	err := checkFlowEntry(raw)
	if err == nil {
		err = decode(fd, raw)
	}
	if err == nil {
		err = checkInstructions(fd.Instructions)
	}
	if err == nil {
		err = reencodes(fd, raw)
	}
	if err != nil {
		return fail(err)
	}
	return Flow{Desc: fd, Raw: raw}
}

func checkInstructions(instrs []openflow15.Instruction) error {
	for i, in := range instrs {
		if in == nil {
			return fmt.Errorf("instruction %d not understood by libOpenflow", i)
		}
		if a, ok := in.(*openflow15.InstrActions); ok {
			if err := checkActions(a.Actions); err != nil {
				return fmt.Errorf("instruction %d: %w", i, err)
			}
		}
	}
	return nil
}
