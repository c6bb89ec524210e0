package plan

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// DumpAll dumps flows, groups and meters in canonical form, whole: for
// mirrors of bridges flowstated does not manage, which are small. Managed
// bridges are compared as hashes (package restore's dumpSwitch).
func DumpAll(ctx context.Context, conn *ofconn.Conn) ([]ActualEntry, error) {
	// Compared as bytes: no libOpenflow decode, which would cost most of
	// the dump's CPU and loses what it does not know.
	flows, err := conn.DumpFlowsRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("restore: dump flows: %w", err)
	}
	groups, meters, err := DumpGroupsAndMeters(ctx, conn)
	if err != nil {
		return nil, err
	}
	return ActualEntries(flows, groups, meters)
}

// DumpGroupsMeters dumps groups and meters in canonical form.
func DumpGroupsMeters(ctx context.Context, conn *ofconn.Conn) ([]ActualEntry, error) {
	groups, meters, err := DumpGroupsAndMeters(ctx, conn)
	if err != nil {
		return nil, err
	}
	return ActualEntries(nil, groups, meters)
}

// DumpGroupsAndMeters dumps groups and meters as the switch sends them.
func DumpGroupsAndMeters(ctx context.Context, conn *ofconn.Conn) ([]ofconn.Group, []ofconn.Meter, error) {
	groups, err := conn.DumpGroups(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("restore: dump groups: %w", err)
	}
	meters, err := conn.DumpMeters(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("restore: dump meters: %w", err)
	}
	return groups, meters, nil
}

// ActualEntries turns dumped entries into canonical form.
func ActualEntries(flows []ofconn.Flow, groups []ofconn.Group, meters []ofconn.Meter) ([]ActualEntry, error) {
	out := make([]ActualEntry, 0, len(flows)+len(groups)+len(meters))
	for _, f := range flows {
		if f.Err != nil {
			return nil, f.Err
		}
		m, err := f.FlowMod()
		if err := appendActual(&out, entry.KindFlow, m, err); err != nil {
			return nil, err
		}
	}
	for _, g := range groups {
		m, err := g.GroupMod()
		if err := appendActual(&out, entry.KindGroup, m, err); err != nil {
			return nil, err
		}
	}
	for _, mt := range meters {
		m, err := mt.MeterMod()
		if err := appendActual(&out, entry.KindMeter, m, err); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// appendActual appends the canonical form of a dumped entry to out.
func appendActual(out *[]ActualEntry, kind entry.Kind, m ofconn.Message, err error) error {
	if err != nil {
		return err
	}
	if kind == entry.KindFlow {
		m = canon.FromSwitch(m)
	}
	payload, id, err := entry.Identify(kind, m)
	if err != nil {
		return fmt.Errorf("restore: dumped %s: %w", kind, err)
	}
	*out = append(*out, ActualEntry{Kind: kind, ID: id, Payload: payload})
	return nil
}

// Fresh reports whether a bridge holds only what vswitchd puts on a new
// bridge: nothing, or the default NORMAL flow. A bridge that holds more was
// written since vswitchd started: by the operator or another tool, and it is
// not flowstated's to overwrite.
func Fresh(actual []ActualEntry) bool {
	for _, a := range actual {
		if a.Kind != entry.KindFlow || !canon.IsDefaultFlow(a.Payload) {
			return false
		}
	}
	return true
}
