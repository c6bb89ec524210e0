package restore

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// FlowCounters dumps the flows of a connected bridge and returns the switch's
// counters of each, keyed by flow identity (entry.Entry.ID as a string), so
// they join with the desired flows. It changes nothing.
func (e *Engine) FlowCounters(ctx context.Context, bridgeName string) (map[string]ofconn.FlowCounters, error) {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return nil, err
	}
	conn, err := e.vswitchd.Connected(b)
	if err != nil {
		return nil, err
	}
	flows, err := conn.DumpFlowsRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("restore: bridge %s: %w", bridgeName, err)
	}
	out := make(map[string]ofconn.FlowCounters, len(flows))
	for _, f := range flows {
		if f.Err != nil {
			return nil, f.Err
		}
		m, err := f.FlowMod()
		if err != nil {
			return nil, err
		}
		_, id, err := entry.Identify(entry.KindFlow, m)
		if err != nil {
			return nil, fmt.Errorf("restore: bridge %s: dumped flow: %w", bridgeName, err)
		}
		if out[string(id)], err = f.Counters(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
