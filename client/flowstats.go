package client

import (
	"context"
	"errors"
	"io"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
)

// FlowStats is a desired flow with the counters the switch holds for it.
type FlowStats struct {
	Entry StoredEntry
	// Installed is false when the switch lacks the flow (then the counters
	// are zero).
	Installed bool
	// Packets and Bytes are the switch's counters; Duration how long the
	// switch has held the flow.
	Packets, Bytes uint64
	Duration       time.Duration
}

// FlowStats returns the desired flows of f.Bridge (required) that match f,
// in the order of List, with the switch's counters. f.Kind is ignored. It
// fails with errdefs.ErrUnavailable while the bridge is not connected.
func (c *Client) FlowStats(ctx context.Context, f Filter) ([]FlowStats, error) {
	req := &flowstatev1.FlowStatsRequest{Bridge: f.Bridge, Module: f.Module}
	if f.Table != nil {
		t := uint32(*f.Table)
		req.Table = &t
	}
	stream, err := c.api.FlowStats(ctx, req)
	if err != nil {
		return nil, fromGRPC(err)
	}
	var out []FlowStats
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fromGRPC(err)
		}
		for _, fs := range resp.GetFlows() {
			out = append(out, FlowStats{
				Entry: fromStored(fs.GetEntry()), Installed: fs.GetInstalled(),
				Packets: fs.GetPacketCount(), Bytes: fs.GetByteCount(), Duration: fs.GetDuration().AsDuration(),
			})
		}
	}
}
