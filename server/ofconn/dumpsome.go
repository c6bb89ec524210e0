package ofconn

import (
	"context"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
)

// Dumps of a few entries, to read back what the switch made of entries just
// installed without dumping a whole bridge. Each asks with one multipart
// request per entry, all written at once.

// FlowKey names a flow as OVS tells flows apart: table, and the ofp_match
// (header, fields and padding) of its FLOW_MOD.
type FlowKey struct {
	Table uint8
	Match []byte
}

// DumpFlowsMatching returns, raw as DumpFlowsRaw does, the flows of each
// key's table whose match is the key's or more specific (OFPMP_FLOW_DESC
// with that table and match): the flow itself among them, if the switch
// holds it.
func (c *Conn) DumpFlowsMatching(ctx context.Context, keys []FlowKey) ([]Flow, error) {
	bodies := make([]util.Message, len(keys))
	for i, k := range keys {
		b := make(rawBody, 32, 32+len(k.Match))
		b[0] = k.Table
		be.PutUint32(b[4:], openflow15.P_ANY)
		be.PutUint32(b[8:], openflow15.OFPG_ANY)
		bodies[i] = append(b, k.Match...)
	}
	return c.rawFlows(ctx, bodies)
}

// DumpGroupsByID returns the groups of ids the switch holds.
func (c *Conn) DumpGroupsByID(ctx context.Context, ids []uint32) ([]Group, error) {
	groups, err := c.groupDescs(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("ofconn: dump groups: %w", err)
	}
	return groups, nil
}

// DumpMetersByID returns the meters of ids the switch holds.
func (c *Conn) DumpMetersByID(ctx context.Context, ids []uint32) ([]Meter, error) {
	bodies := make([]util.Message, len(ids))
	for i, id := range ids {
		bodies[i] = openflow15.NewMeterMultipartRequest(id)
	}
	var meters []Meter
	err := c.multiparts(ctx, openflow15.MultipartType_MeterDesc, bodies, false, minMeterDesc, func(raw []byte) error {
		meters = append(meters, decodeMeter(raw))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ofconn: dump meters: %w", err)
	}
	return meters, nil
}

// rawBody is an encoded multipart request body.
type rawBody []byte

func (r rawBody) Len() uint16                    { return uint16(len(r)) }
func (r rawBody) MarshalBinary() ([]byte, error) { return r, nil }
func (r rawBody) UnmarshalBinary([]byte) error {
	return fmt.Errorf("ofconn: a request body is not decoded")
}
