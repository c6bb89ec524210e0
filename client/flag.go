package client

import (
	"context"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
)

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
