package plan

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// EachFlowMod dumps the flows of conn's bridge and calls fn with the
// canonical FLOW_MOD of each and whether it lies in space, the owned cookie space.
// m is valid only during the call (one buffer serves the whole dump): fn
// clones what it keeps. Flows with timeouts are left out.
func EachFlowMod(ctx context.Context, conn *ofconn.Conn, space entry.CookieSpace, fn func(m []byte, owned bool)) error {
	var buf []byte
	err := conn.EachFlow(ctx, func(f ofconn.Flow) error {
		if f.Err != nil {
			return f.Err
		}
		m, err := entry.AppendFlowFromDesc(buf, f.Raw)
		if err != nil {
			return fmt.Errorf("dumped flow: %w", err)
		}
		buf = m
		if idle, hard := entry.FlowModTimeouts(m); idle != 0 || hard != 0 {
			// An idle or hard timeout: a flow vswitchd learned (learn
			// actions) or one that expires by itself. It is never desired
			// state (entry.CheckDesiredFlow), so it is nobody's to delete,
			// compare or mirror.
			return nil
		}
		m = canon.FromSwitch(m)
		fn(m, space.Owns(entry.FlowCookie(m)))
		return nil
	})
	if err != nil {
		return fmt.Errorf("restore: dump flows: %w", err)
	}
	return nil
}
