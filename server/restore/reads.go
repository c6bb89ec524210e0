package restore

import (
	"context"
)

// Reads: what the switch and the store say, without changing either. List
// and Get read the store (status.go has the bridges' state); Diff compares
// the switch with the store as a replay would.

// Diff calls fn for every change a replay of bridgeName would send now, in
// order, under the bridge's lock: fn must not wait long.
func (e *Engine) Diff(ctx context.Context, bridgeName string, fn func(Change) error) error {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return err
	}
	conn, err := b.connected()
	if err != nil {
		return err
	}
	return e.diffNow(ctx, b, conn, fn)
}
