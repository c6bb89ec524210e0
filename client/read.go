package client

import (
	"context"
	"errors"
	"io"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
)

// Filter selects entries for List; zero fields match everything.
type Filter struct {
	Bridge, Module string
	Kind           entry.Kind
	Table          *uint8
}

// StoredEntry is a desired entry as flowstated holds it.
type StoredEntry struct {
	Bridge, Module string
	Kind           entry.Kind
	// Text is the entry in ovs-ofctl dump syntax.
	Text string
	// OpenFlow is its canonical OpenFlow 1.5 encoding.
	OpenFlow []byte
}

// List returns the desired entries that match f.
func (c *Client) List(ctx context.Context, f Filter) ([]StoredEntry, error) {
	req := &flowstatev1.ListRequest{Bridge: f.Bridge, Module: f.Module, Kind: flowstatev1.EntryKind(f.Kind)}
	if f.Table != nil {
		t := uint32(*f.Table)
		req.Table = &t
	}
	stream, err := c.api.List(ctx, req)
	if err != nil {
		return nil, fromGRPC(err)
	}
	var out []StoredEntry
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fromGRPC(err)
		}
		for _, se := range resp.GetEntries() {
			out = append(out, fromStored(se))
		}
	}
}

// Status returns flowstated's state.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	resp, err := c.api.Status(ctx, &flowstatev1.StatusRequest{})
	if err != nil {
		return nil, fromGRPC(err)
	}
	return fromStatus(resp), nil
}

// Diff returns how bridge differs from its desired state, in the order a
// replay would send the changes. It changes nothing.
func (c *Client) Diff(ctx context.Context, bridge string) ([]Change, error) {
	stream, err := c.api.Diff(ctx, &flowstatev1.DiffRequest{Bridge: bridge})
	if err != nil {
		return nil, fromGRPC(err)
	}
	var out []Change
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fromGRPC(err)
		}
		out = append(out, fromChanges(resp.GetChanges())...)
	}
}

// Reconcile makes bridge (every bridge when empty) hold its desired state now
// and returns the state of each bridge reconciled.
func (c *Client) Reconcile(ctx context.Context, bridge string) ([]BridgeStatus, error) {
	resp, err := c.api.Reconcile(ctx, &flowstatev1.ReconcileRequest{Bridge: bridge})
	if err != nil {
		return nil, fromGRPC(err)
	}
	return fromBridges(resp.GetBridges()), nil
}
