package client

import (
	"context"
	"errors"
	"io"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
)

// GroupText is a group in ovs-ofctl add-group syntax.
func GroupText(s string) Entry { return Entry{Kind: entry.KindGroup, Text: s} }

// MeterText is a meter in ovs-ofctl add-meter syntax.
func MeterText(s string) Entry { return Entry{Kind: entry.KindMeter, Text: s} }

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
	all := toProto(es)
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

// Reconcile makes bridge (every bridge when empty) hold its desired state now.
func (c *Client) Reconcile(ctx context.Context, bridge string) (*flowstatev1.ReconcileResponse, error) {
	resp, err := c.api.Reconcile(ctx, &flowstatev1.ReconcileRequest{Bridge: bridge})
	if err != nil {
		return nil, fromGRPC(err)
	}
	return resp, nil
}

// Diff returns how bridge differs from its desired state.
func (c *Client) Diff(ctx context.Context, bridge string) ([]*flowstatev1.Change, error) {
	resp, err := c.api.Diff(ctx, &flowstatev1.DiffRequest{Bridge: bridge})
	if err != nil {
		return nil, fromGRPC(err)
	}
	return resp.GetChanges(), nil
}

// Watch streams events to fn until ctx ends or fn returns an error. Pass the
// stream id and revision of the last event seen to resume (zero values: from
// now). When the server cannot resume (ErrFailedPrecondition), resync and
// watch from zero.
func (c *Client) Watch(ctx context.Context, streamID string, from uint64, fn func(*flowstatev1.Event) error) error {
	stream, err := c.api.Watch(ctx, &flowstatev1.WatchRequest{FromRevision: from, StreamId: streamID})
	if err != nil {
		return fromGRPC(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fromGRPC(err)
		}
		if err := fn(resp.GetEvent()); err != nil {
			return err
		}
	}
}

// Arm sets flow-restore-wait before a planned restart of ovs-vswitchd, only if
// flowstated can restore and release the switch afterwards (errors wrap
// errdefs.ErrFailedPrecondition or ErrUnavailable otherwise). wasSet reports
// that it was set already.
func (c *Client) Arm(ctx context.Context) (wasSet bool, err error) {
	resp, err := c.api.Arm(ctx, &flowstatev1.ArmRequest{})
	if err != nil {
		return false, fromGRPC(err)
	}
	return resp.GetWasSet(), nil
}

// Release clears flow-restore-wait and returns once ovs-vswitchd has read the
// change; ack is how long that took.
func (c *Client) Release(ctx context.Context) (wasSet bool, ack time.Duration, err error) {
	resp, err := c.api.Release(ctx, &flowstatev1.ReleaseRequest{})
	if err != nil {
		return false, 0, fromGRPC(err)
	}
	return resp.GetWasSet(), resp.GetAcknowledgedAfter().AsDuration(), nil
}
