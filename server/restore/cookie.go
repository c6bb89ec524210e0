package restore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// Ownership by cookie (Config.OwnedCookie).
//
// On every managed bridge the engine manages the flows whose cookie lies in
// the owned space, and only those: a dump counts the others and leaves them
// out of every comparison (switchState), so replays, audits, diffs and
// status never see them, and a new store never counts them as flows it would
// delete (undeclaredEntries). A declared flow outside the space is refused
// (checkOwned). After a vswitchd restart, the foreign flows come back from
// the bridge's mirror, like an unmanaged bridge's (see mirror.go).
//
// Groups and meters have no cookie: with a space other than 0/0, those the
// switch holds and no module declared are someone else's and left alone
// (explicit adoption: declaring a group or meter takes it over); with 0/0
// the engine owns them all, as it owns every flow.

// OwnedCookie is the cookie space the engine manages.
func (e *Engine) OwnedCookie() entry.CookieSpace { return e.cfg.OwnedCookie }

// checkOwned refuses the flows of a write whose cookie lies outside the
// owned space, naming the first one.
func (e *Engine) checkOwned(es []entry.Entry) error {
	space := e.cfg.OwnedCookie
	if space.All() {
		return nil
	}
	for i, d := range es {
		if d.Kind != entry.KindFlow {
			continue
		}
		if c := entry.FlowCookie(d.Payload); !space.Owns(c) {
			return &errdefs.EntryError{Index: i, Err: fmt.Errorf(
				"restore: cookie 0x%x lies outside the owned cookie space %s (flowstated --owned-cookie): flows there belong to another controller, flowstated leaves them alone: %w",
				c, space, errdefs.ErrInvalidArgument)}
		}
	}
	return nil
}

// ownsGroupsAndMeters reports whether undeclared groups and meters on a
// managed bridge are the engine's to delete.
func (e *Engine) ownsGroupsAndMeters() bool { return e.cfg.OwnedCookie.All() }

// errOutside stops the scan of checkStoreOwned at the first flow outside.
var errOutside = errors.New("restore: outside the owned cookie space")

// checkStoreOwned refuses to start with a store that holds flows outside the
// owned space (the space was narrowed): the engine would add them at every
// replay and find them missing at every audit, since it leaves the switch's
// flows outside the space alone.
func checkStoreOwned(st *store.Store, bridges []string, space entry.CookieSpace) error {
	if space.All() {
		return nil
	}
	for _, br := range bridges {
		var first uint64
		err := st.Entries().ScanFlows(br, nil, func(rec store.Record) error {
			if c := entry.FlowCookie(rec.Payload); !space.Owns(c) {
				first = c
				return errOutside
			}
			return nil
		})
		if errors.Is(err, errOutside) {
			return fmt.Errorf("restore: the store holds flows of bridge %s outside the owned cookie space %s (the first has cookie 0x%x): start with a space that holds them, or delete them (flowctl del-flows) first: %w",
				br, space, first, errdefs.ErrFailedPrecondition)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Foreign entries after a restart.
//
// A vswitchd restarted under flow-restore-wait brings a managed bridge back
// without the other controller's flows and groups too, and that controller
// may not be back before flowstated clears the flag. So, as for an
// unmanaged bridge (mirror.go), the engine keeps a mirror of the bridge's
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
		out = append(out, entry.Entry{Kind: entry.KindFlow, ID: flowIdentity(nil, m), Payload: m})
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
// b.mu is held.
func (e *Engine) foreignToRestore(b *managed, fs *flowScan, others []entry.Entry, log *slog.Logger) ([]plan.Change, error) {
	if e.cfg.OwnedCookie.All() {
		return nil, nil
	}
	found := fs.foreignOf(others)
	if b.ForeignSettledLocked() {
		e.saveForeign(b, found, log)
		return nil, nil
	}
	held, known := e.flag.VswitchdHeld()
	if !known {
		return nil, fmt.Errorf("restore: OVSDB cannot tell yet whether vswitchd is held: the flows outside the owned cookie space %s may need restoring: %w", e.cfg.OwnedCookie, errdefs.ErrUnavailable)
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
		e.saveForeign(b, found, log)
		return nil, nil
	}
	want, _, err := e.cfg.Store.Mirrors().Get(b.Name())
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
func (e *Engine) saveForeign(b *managed, found []entry.Entry, log *slog.Logger) {
	if _, err := e.cfg.Store.Mirrors().Set(b.Name(), found); err != nil {
		log.Error("storing the foreign entries of a managed bridge", "err", err)
	}
}
