package write

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// Declared is what a Put or Sync declares: Entries held in memory, or a
// Spool holding a request too large to hold (the server's receive.go), one
// of the two. A write takes the spool: it is closed once the write is done
// with it, which may be after Put or Sync returned (its caller gave up while
// the write was under way).
type Declared struct {
	Entries []entry.Entry
	Spool   *store.Spool
}

// check refuses a Declared that is both, and entries outside the owned
// cookie space (a spool's were checked as they arrived).
func (d Declared) check(space entry.CookieSpace) error {
	if d.Spool != nil && len(d.Entries) > 0 {
		_ = d.Spool.Close()
		return fmt.Errorf("restore: a write declares both entries and a spool: %w", errdefs.ErrInvalidArgument)
	}
	return CheckOwned(space, d.Entries, 0)
}

// Put stores d's entries as module's on bridge. While the bridge is
// connected and converged, the changes go to the switch in one bundle first
// and are stored only if it accepted them (applied is true). Otherwise they
// are stored for the next replay.
func (ws *Writes) Put(ctx context.Context, bridgeName, module string, d Declared) (applied bool, err error) {
	if err := d.check(ws.cfg.OwnedCookie); err != nil {
		return false, err
	}
	if d.Spool != nil {
		r, err := ws.submit(ctx, bridgeName, ws.stagedReq(bridgeName, module, d.Spool, false))
		return r.applied, err
	}
	es := d.Entries
	fo := flowsOnly(es)
	applied, _, err = ws.write(ctx, bridgeName, &writeReq{declared: es, flowsOnly: fo,
		put: fo && !slices.ContainsFunc(es, func(en entry.Entry) bool { return en.Opaque }), module: module,
		op: func(w *store.Writer) (store.Result, error) { return w.Put(bridgeName, module, es) }})
	return applied, err
}

// SyncResult is the outcome of a Sync.
type SyncResult struct {
	// Applied is true when the switch already holds the new set.
	Applied bool
	// Added counts the entries the module did not declare before, Changed
	// those it declared with other content, Removed those of the old set
	// that are gone.
	Added, Changed, Removed int
}

// Sync makes d's entries the complete set of module's entries on bridge;
// the entries it no longer declares leave the switch in the same bundle that
// brings the new ones. With ready, the module is then marked ready for this
// boot.
func (ws *Writes) Sync(ctx context.Context, bridgeName, module string, d Declared, ready bool) (SyncResult, error) {
	if err := d.check(ws.cfg.OwnedCookie); err != nil {
		return SyncResult{}, err
	}
	if d.Spool != nil {
		return ws.syncWrite(ctx, bridgeName, module, ws.stagedReq(bridgeName, module, d.Spool, true), ready)
	}
	es := d.Entries
	return ws.syncWrite(ctx, bridgeName, module, &writeReq{declared: es, flowsOnly: flowsOnly(es), sync: true,
		op: func(w *store.Writer) (store.Result, error) { return w.Sync(bridgeName, module, es) }}, ready)
}

// syncWrite runs req, a Sync, and with ready then marks module ready.
func (ws *Writes) syncWrite(ctx context.Context, bridgeName, module string, req *writeReq, ready bool) (SyncResult, error) {
	r, err := ws.submit(ctx, bridgeName, req)
	if err != nil {
		return SyncResult{}, err
	}
	out := syncResult(r)
	if ready {
		if err := ws.cfg.Gate.MarkReady(module); err != nil {
			return out, err
		}
	}
	return out, nil
}

// flowsOnly reports whether es declares flows alone.
func flowsOnly(es []entry.Entry) bool {
	return !slices.ContainsFunc(es, func(en entry.Entry) bool { return en.Kind != entry.KindFlow })
}

// Delete removes entries of module on bridge by identity (keys carry Kind and
// ID), from the switch and the store together, like Put.
func (ws *Writes) Delete(ctx context.Context, bridgeName, module string, keys []entry.Entry) (applied bool, n int, err error) {
	applied, res, err := ws.Do(ctx, bridgeName, func(w *store.Writer) (store.Result, error) { return w.Delete(bridgeName, module, keys) })
	return applied, len(res.Removed), err
}

// Do runs op, a store operation, as a write of bridgeName, as Delete does:
// in the bridge's queue, in one transaction with the writes committed with
// it; what op stores goes to the switch as any write's changes do.
func (ws *Writes) Do(ctx context.Context, bridgeName string, op func(w *store.Writer) (store.Result, error)) (applied bool, res store.Result, err error) {
	return ws.write(ctx, bridgeName, &writeReq{op: op})
}

// rejection names the first refused entry of a write request, and the
// vswitchd that refused it by its version (RejectedError.By).
func rejection(re *plan.RejectedError) error {
	by := cmp.Or(re.By, "ovs-vswitchd")
	err := fmt.Errorf("%w: %w", re.Err, errdefs.ErrInvalidArgument)
	for i, c := range re.Changes {
		if c.Index >= 0 {
			return &errdefs.EntryError{Index: c.Index, Err: fmt.Errorf("restore: %s refused the %s: %s: %w", by, c.Kind, re.Reasons[i], err)}
		}
	}
	return fmt.Errorf("restore: %s refused the write: %w", by, err)
}

// syncResult counts what a Sync changed.
func syncResult(r writeResult) SyncResult {
	if r.staged != nil {
		return SyncResult{Applied: r.applied, Added: r.staged.Added, Changed: r.staged.Changed, Removed: r.staged.Removed}
	}
	out := SyncResult{Applied: r.applied, Removed: len(r.res.Removed)}
	for _, c := range r.res.Changed {
		if c.Existed {
			out.Changed++
		} else {
			out.Added++
		}
	}
	return out
}

// stagedReq is the write request of a spooled Put or Sync.
func (ws *Writes) stagedReq(bridgeName, module string, sp *store.Spool, sync bool) *writeReq {
	w := store.StagedWrite{Bridge: bridgeName, Module: module, Sync: sync, Spool: sp}
	return &writeReq{alone: func(ctx context.Context, b *bridgeQueue) writeResult { return ws.commitStaged(ctx, b, w) },
		release: func() { _ = sp.Close() }}
}
