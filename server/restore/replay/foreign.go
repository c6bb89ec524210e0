package replay

import (
	"fmt"
	"log/slog"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// Foreign entries after a restart.
//
// A vswitchd restarted under flow-restore-wait brings a managed bridge back
// without the other controller's flows and groups too, and that controller
// may not be back before flowstated clears the flag. So, as for an
// unmanaged bridge (package mirror), the engine keeps a mirror of the bridge's
// foreign entries (flows outside the space, and the groups and meters no
// module declared), refreshed from every dump it makes of the bridge
// (replays and audits, so at least every --audit-interval), and puts them
// back in the bundle of the first replay of a connection when vswitchd is
// held and the bridge holds no foreign entry. A first dump that shows
// foreign entries, or a vswitchd already released, settles the connection
// without a restore: the other controller's flows are where it left them.

// foreignOf returns the foreign entries of a dump: the flows outside the
// owned space and, when the engine does not own them all, the groups and
// meters no module declared (others).
func (fs *flowScan) foreignOf(others []entry.Entry) []entry.Entry {
	out := make([]entry.Entry, 0, len(fs.sw.foreignFlows))
	for _, m := range fs.sw.foreignFlows {
		out = append(out, entry.Entry{Kind: entry.KindFlow, ID: entry.AppendFlowID(nil, m), Payload: m})
	}
	if !fs.keepUndeclared {
		return out
	}
	_, undeclared := fs.byDeclared(others)
	for _, a := range undeclared {
		out = append(out, entry.Entry{Kind: a.Kind, ID: a.ID, Payload: a.Payload})
	}
	return out
}

// foreignToRestore decides, at a replay of b, whether its bundle brings back
// the mirrored foreign entries, and returns the changes that do it. Once
// the connection is settled it refreshes the mirror from the dump instead.
// the bridge's lock is held.
func (rp *Replayer) foreignToRestore(b *bridge.State, fs *flowScan, others []entry.Entry, log *slog.Logger) ([]plan.Change, error) {
	if rp.cfg.OwnedCookie.All() {
		return nil, nil
	}
	found := fs.foreignOf(others)
	if b.ForeignSettledLocked() {
		rp.saveForeign(b, found, log)
		return nil, nil
	}
	held, known := rp.cfg.Flag.VswitchdHeld()
	if !known {
		return nil, fmt.Errorf("restore: OVSDB cannot tell yet whether vswitchd is held: the flows outside the owned cookie space %s may need restoring: %w", rp.cfg.OwnedCookie, errdefs.ErrUnavailable)
	}
	actual := make([]plan.ActualEntry, len(found))
	for i, f := range found {
		actual[i] = plan.ActualEntry{Kind: f.Kind, ID: f.ID, Payload: f.Payload}
	}
	// Only what vswitchd puts on a new bridge (the default flow, cookie 0)
	// means the foreign entries were lost; anything more, the other
	// controller is back or never left.
	if !held || !plan.Fresh(actual) {
		b.SettleForeignLocked()
		rp.saveForeign(b, found, log)
		return nil, nil
	}
	want, _, err := rp.cfg.Store.Mirrors().Get(b.Name())
	if err != nil {
		return nil, err
	}
	cs := plan.Diff(want, actual, nil)
	if len(cs) == 0 {
		b.SettleForeignLocked()
	}
	for i := range cs {
		cs[i].Foreign = true
	}
	return cs, nil
}

// saveForeign stores found as b's mirror of foreign entries (a no-op when
// unchanged).
func (rp *Replayer) saveForeign(b *bridge.State, found []entry.Entry, log *slog.Logger) {
	if _, err := rp.cfg.Store.Mirrors().Set(b.Name(), found); err != nil {
		log.Error("storing the foreign entries of a managed bridge", "err", err)
	}
}
