package client

import (
	"context"
	"errors"
	"io"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
)

// Entry is an entry to declare: in ovs-ofctl syntax or encoded.
type Entry struct {
	Kind entry.Kind
	// Text is the entry in ovs-ofctl syntax; or
	Text string
	// OpenFlow is the encoded OpenFlow 1.5 message, command ADD.
	OpenFlow []byte
}

// FlowText is a flow in ovs-ofctl syntax, e.g. "table=0,priority=100,ip,actions=drop".
func FlowText(s string) Entry { return Entry{Kind: entry.KindFlow, Text: s} }

// FlowBytes is an encoded OpenFlow 1.5 FLOW_MOD (command ADD).
func FlowBytes(b []byte) Entry { return Entry{Kind: entry.KindFlow, OpenFlow: b} }

// GroupText is a group in ovs-ofctl add-group syntax.
func GroupText(s string) Entry { return Entry{Kind: entry.KindGroup, Text: s} }

// MeterText is a meter in ovs-ofctl add-meter syntax.
func MeterText(s string) Entry { return Entry{Kind: entry.KindMeter, Text: s} }

// Put declares entries of module on bridge. applied reports whether the switch
// already holds them (false: stored, applied at the next replay).
func (c *Client) Put(ctx context.Context, bridge, module string, es ...Entry) (applied bool, err error) {
	resp, err := c.api.Put(ctx, &flowstatev1.PutRequest{Bridge: bridge, Module: module, Entries: toProtoEntries(es)})
	if err != nil {
		return false, fromGRPC(err)
	}
	return resp.GetApplied(), nil
}

// Delete removes entries of module on bridge, named by identity (for flows:
// table, priority and match; actions may be omitted).
func (c *Client) Delete(ctx context.Context, bridge, module string, es ...Entry) (applied bool, err error) {
	resp, err := c.api.Delete(ctx, &flowstatev1.DeleteRequest{Bridge: bridge, Module: module, Entries: toProtoEntries(es)})
	if err != nil {
		return false, fromGRPC(err)
	}
	return resp.GetApplied(), nil
}

// syncBatch is the number of entries per Sync message.
const syncBatch = 1024

// Sync replaces the complete set of module's entries on bridge with es: what
// the module declared before and is not in es is removed, on the switch in the
// same bundle. ready also marks the module ready for this boot.
func (c *Client) Sync(ctx context.Context, bridge, module string, ready bool, es ...Entry) (applied bool, err error) {
	stream, err := c.api.Sync(ctx)
	if err != nil {
		return false, fromGRPC(err)
	}
	all := toProtoEntries(es)
	for i := 0; i == 0 || i < len(all); i += syncBatch {
		req := &flowstatev1.SyncRequest{Entries: all[i:min(i+syncBatch, len(all))]}
		if i == 0 {
			req.Bridge, req.Module, req.Ready = bridge, module, ready
		}
		if err := stream.Send(req); err != nil {
			if errors.Is(err, io.EOF) {
				break // the server ended the stream; CloseAndRecv says why
			}
			return false, fromGRPC(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return false, fromGRPC(err)
	}
	return resp.GetApplied(), nil
}

// MarkReady marks module ready for this boot without changing its entries.
func (c *Client) MarkReady(ctx context.Context, module string) error {
	_, err := c.api.MarkReady(ctx, &flowstatev1.MarkReadyRequest{Module: module})
	return fromGRPC(err)
}
