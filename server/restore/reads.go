package restore

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// Reads: what the switch and the store say, without changing either. Diff
// compares the switch with the store as a replay would; FlowCounters
// (counters.go) reads the switch's counters; Status, Counts and Modules
// (status.go) the engine's and the store's state.

// Diff calls fn for every change a replay of bridgeName would send now, in
// order, under the bridge's lock: fn must not wait long.
func (e *Engine) Diff(ctx context.Context, bridgeName string, fn func(plan.Change) error) error {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return err
	}
	conn, err := e.vswitchd.Connected(b)
	if err != nil {
		return err
	}
	return e.replay.Diff(ctx, b, conn, fn)
}

// Reconcile replays bridgeName now and returns its state.
func (e *Engine) Reconcile(ctx context.Context, bridgeName string) (BridgeStatus, error) {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return BridgeStatus{}, err
	}
	if !e.gate.IsOpen() {
		return BridgeStatus{}, fmt.Errorf("restore: replays are held until required modules are ready (%s): %w", e.gate.Status().Reason, errdefs.ErrFailedPrecondition)
	}
	conn, err := e.vswitchd.Connected(b)
	if err != nil {
		return BridgeStatus{}, err
	}
	if _, err := e.replay.Reconcile(ctx, b, conn, e.log.With("bridge", b.Name())); err != nil {
		return BridgeStatus{Snapshot: b.Snapshot()}, err
	}
	return BridgeStatus{Snapshot: b.Snapshot()}, nil
}
