package restore

import (
	"context"
	"fmt"
	"slices"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/store"
)

// Put stores es as entries of module on bridge. While the bridge is connected
// and converged, the changes go to the switch in one bundle first and are
// stored only if it accepted them (applied is true). Otherwise they are stored
// for the next replay.
func (e *Engine) Put(ctx context.Context, bridgeName, module string, es []entry.Entry) (applied bool, err error) {
	if err := e.checkOwned(es); err != nil {
		return false, err
	}
	fo := flowsOnly(es)
	applied, _, err = e.write(ctx, bridgeName, &writeReq{declared: es, flowsOnly: fo,
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

// Sync makes es the complete set of module's entries on bridge; the entries it
// no longer declares leave the switch in the same bundle that brings the new
// ones. With ready, the module is then marked ready for this boot.
func (e *Engine) Sync(ctx context.Context, bridgeName, module string, es []entry.Entry, ready bool) (SyncResult, error) {
	if err := e.checkOwned(es); err != nil {
		return SyncResult{}, err
	}
	return e.syncWrite(ctx, bridgeName, module, &writeReq{declared: es, flowsOnly: flowsOnly(es), sync: true,
		op: func(w *store.Writer) (store.Result, error) { return w.Sync(bridgeName, module, es) }}, ready)
}

// syncWrite runs req, a Sync, and with ready then marks module ready.
func (e *Engine) syncWrite(ctx context.Context, bridgeName, module string, req *writeReq, ready bool) (SyncResult, error) {
	r, err := e.submit(ctx, bridgeName, req)
	if err != nil {
		return SyncResult{}, err
	}
	out := syncResult(r)
	if ready {
		if err := e.MarkReady(module); err != nil {
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
func (e *Engine) Delete(ctx context.Context, bridgeName, module string, keys []entry.Entry) (applied bool, n int, err error) {
	applied, res, err := e.write(ctx, bridgeName, &writeReq{
		op: func(w *store.Writer) (store.Result, error) { return w.Delete(bridgeName, module, keys) }})
	return applied, len(res.Removed), err
}

// MarkReady marks module ready for this boot, which may open the gate.
func (e *Engine) MarkReady(module string) error {
	if err := e.cfg.Store.SetReady(module, e.cfg.BootID); err != nil {
		return err
	}
	e.log.Info("module ready", "module", module, "boot_id", e.cfg.BootID)
	e.publish(events.Event{Type: events.ModuleReady, Module: module, Message: "module ready for this boot"})
	e.gate.poke()
	return nil
}

// changeID is the identity of the entry a change touches.
func changeID(c Change) []byte {
	if c.Op == OpDelete {
		_, id, err := entry.Identify(c.Kind, c.Actual)
		if err == nil {
			return id
		}
	}
	return c.Desired.ID
}

// rejection names the first refused entry of a write request.
func rejection(re *RejectedError) error {
	err := fmt.Errorf("rejected by ovs-vswitchd: %w: %w", re.Err, errdefs.ErrInvalidArgument)
	for i, c := range re.Changes {
		if c.Index >= 0 {
			return &errdefs.EntryError{Index: c.Index, Err: fmt.Errorf("%s: %w", re.Reasons[i], err)}
		}
	}
	return err
}

// Reconcile replays bridgeName now and returns its state.
func (e *Engine) Reconcile(ctx context.Context, bridgeName string) (BridgeStatus, error) {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return BridgeStatus{}, err
	}
	if !e.gate.isOpen() {
		return BridgeStatus{}, fmt.Errorf("replays are held until required modules are ready (%s): %w", e.gate.status().Reason, errdefs.ErrFailedPrecondition)
	}
	conn, err := b.connected()
	if err != nil {
		return BridgeStatus{}, err
	}
	if _, err := e.reconcile(ctx, b, conn, e.log.With("bridge", b.name)); err != nil {
		return b.snapshot(), err
	}
	return b.snapshot(), nil
}

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

func (b *bridge) connected() (*ofconn.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil {
		return nil, fmt.Errorf("bridge %s is not connected: %w", b.name, errdefs.ErrUnavailable)
	}
	return b.conn, nil
}
