package restore

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	applied, _, err = e.write(ctx, bridgeName, es, func(w *store.Writer) (store.Result, error) {
		return w.Put(bridgeName, module, es)
	})
	return applied, err
}

// Sync makes es the complete set of module's entries on bridge; the entries it
// no longer declares leave the switch in the same bundle that brings the new
// ones. With ready, the module is then marked ready for this boot.
func (e *Engine) Sync(ctx context.Context, bridgeName, module string, es []entry.Entry, ready bool) (applied bool, removed int, err error) {
	applied, res, err := e.write(ctx, bridgeName, es, func(w *store.Writer) (store.Result, error) {
		return w.Sync(bridgeName, module, es)
	})
	if err != nil {
		return false, 0, err
	}
	if ready {
		if err := e.MarkReady(module); err != nil {
			return applied, len(res.Removed), err
		}
	}
	return applied, len(res.Removed), nil
}

// Delete removes entries of module on bridge by identity (keys carry Kind and
// ID), from the switch and the store together, like Put.
func (e *Engine) Delete(ctx context.Context, bridgeName, module string, keys []entry.Entry) (applied bool, n int, err error) {
	applied, res, err := e.write(ctx, bridgeName, nil, func(w *store.Writer) (store.Result, error) {
		return w.Delete(bridgeName, module, keys)
	})
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

// writeReq is one write waiting for its bridge.
type writeReq struct {
	ctx context.Context
	op  func(w *store.Writer) (store.Result, error)
	// declared are the entries the request declares (their quarantine is
	// lifted: the write itself tells whether the switch takes them now).
	declared []entry.Entry
	done     chan writeResult // buffered: the committer never blocks
}

type writeResult struct {
	applied bool
	res     store.Result
	err     error
}

// write queues a store operation for bridgeName and waits for its outcome.
//
// Writes to one bridge are group-committed: the first writer to find no
// commit under way becomes the committer and takes every queued request in
// one store transaction and one bundle (commitBatch); writers arriving
// meanwhile queue for the next round. So concurrent controllers share
// fsyncs and bundles, and a single writer pays nothing extra.
func (e *Engine) write(ctx context.Context, bridgeName string, declared []entry.Entry, op func(w *store.Writer) (store.Result, error)) (bool, store.Result, error) {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return false, store.Result{}, err
	}
	req := &writeReq{ctx: ctx, op: op, declared: declared, done: make(chan writeResult, 1)}
	b.qmu.Lock()
	b.queue = append(b.queue, req)
	lead := !b.committing
	b.committing = true
	b.qmu.Unlock()
	if lead {
		e.commitQueued(b)
	}
	r := <-req.done
	return r.applied, r.res, r.err
}

// commitQueued commits queued writes until the queue is empty.
func (e *Engine) commitQueued(b *bridge) {
	for {
		b.qmu.Lock()
		batch := b.queue
		b.queue = nil
		if len(batch) == 0 {
			b.committing = false
			b.qmu.Unlock()
			return
		}
		b.qmu.Unlock()
		e.cfg.Metrics.writeBatches.WithLabelValues(b.name).Inc()
		e.cfg.Metrics.writeRequests.WithLabelValues(b.name).Add(float64(len(batch)))
		e.commitBatch(b, batch)
	}
}

// commitBatch commits batch in one transaction and one bundle. If any
// request of it fails (a conflict, a refusal by the switch), two requests
// change the same entry, or a request changes a meter, the requests are
// committed one by one instead, so that one bad request fails alone with its
// own error.
func (e *Engine) commitBatch(b *bridge, batch []*writeReq) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(batch) > 1 {
		// The bundle outlives any one caller: bound it on its own.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), batchTimeout)
		results, err := e.commitLocked(ctx, b, batch)
		cancel()
		if err == nil {
			for i, r := range batch {
				r.done <- results[i]
			}
			return
		}
	}
	for _, r := range batch {
		results, err := e.commitLocked(r.ctx, b, []*writeReq{r})
		if err != nil {
			r.done <- writeResult{err: err}
			continue
		}
		r.done <- results[0]
	}
}

// batchTimeout bounds a group-committed bundle.
const batchTimeout = time.Minute

var (
	errOverlap = errors.New("requests of a batch change the same entry")
	// Meters are sent before the bundle and stay on the switch if the bundle
	// is refused: a request retried alone after its batch failed would then
	// find its meter there already. Requests with meters commit alone.
	errMeterInBatch = errors.New("meters are not group-committed")
)

// commitLocked runs reqs in one store transaction whose changes go to the
// switch before the commit, when the bridge is live (connected, converged,
// gate open). A lost connection does not fail the write: it is stored
// unapplied and the next replay converges the switch, so controllers are
// never blocked by an OVS restart. b.mu must be held.
func (e *Engine) commitLocked(ctx context.Context, b *bridge, reqs []*writeReq) ([]writeResult, error) {
	conn := b.conn
	live := conn != nil && b.converged && e.gate.isOpen()
	results := make([]writeResult, len(reqs))
	err := e.cfg.Store.Update(func(w *store.Writer) error {
		var cs []Change
		seen := map[string]bool{}
		for i, r := range reqs {
			res, err := r.op(w)
			if err != nil {
				return err
			}
			results[i].res = res
			for _, c := range writeChanges(res.Changed, res.Removed) {
				if len(reqs) > 1 && c.Kind == entry.KindMeter {
					return errMeterInBatch
				}
				k := key(c.Kind, changeID(c))
				if seen[k] {
					return errOverlap
				}
				seen[k] = true
				cs = append(cs, c)
			}
		}
		if !live || len(cs) == 0 {
			return nil
		}
		_, err := applyPlan(ctx, conn, newPlan(cs))
		if err == nil {
			return nil
		}
		var re *RejectedError
		if errors.As(err, &re) {
			return rejection(re)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.converged = false
		b.publishLocked()
		live = false
		e.log.Warn("write not applied, it will be replayed", "bridge", b.name, "err", err)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, r := range reqs {
		results[i].applied = live
		b.unquarantineLocked(r.declared)
		b.unquarantineLocked(results[i].res.Removed)
	}
	if !live {
		b.requestReplay()
	}
	return results, nil
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

// unquarantineLocked forgets the quarantine of entries a module writes
// again: the write itself tells whether the switch accepts them now.
func (b *bridge) unquarantineLocked(es []entry.Entry) {
	if len(b.quarantine) == 0 {
		return
	}
	for _, en := range es {
		delete(b.quarantine, key(en.Kind, en.ID))
	}
	b.publishLocked()
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

// Diff returns the changes a replay of bridgeName would send now, in order.
func (e *Engine) Diff(ctx context.Context, bridgeName string) ([]Change, error) {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return nil, err
	}
	conn, err := b.connected()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	desired, err := e.cfg.Store.Entries(b.name)
	if err != nil {
		return nil, err
	}
	actual, err := dumpAll(ctx, conn)
	if err != nil {
		return nil, err
	}
	skip, _ := quarantineSkips(b.quarantine, desired)
	return newPlan(diff(desired, actual, skip)).changes(), nil
}

func (b *bridge) connected() (*ofconn.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil {
		return nil, fmt.Errorf("bridge %s is not connected: %w", b.name, errdefs.ErrUnavailable)
	}
	return b.conn, nil
}

// Status returns the state of every managed bridge, in flag order.
func (e *Engine) Status() []BridgeStatus {
	out := make([]BridgeStatus, 0, len(e.order))
	for _, name := range e.order {
		out = append(out, e.bridges[name].snapshot())
	}
	return out
}

// Gate returns the state of the boot gate.
func (e *Engine) Gate() GateStatus { return e.gate.status() }

// ModuleState is the readiness of one module.
type ModuleState struct {
	Required, Ready bool
}

// Modules returns the readiness of every module that is required or marked
// itself ready at some boot.
func (e *Engine) Modules() (map[string]ModuleState, error) {
	ready, err := e.cfg.Store.ReadyBoots()
	if err != nil {
		return nil, err
	}
	out := map[string]ModuleState{}
	for m, boot := range ready {
		out[m] = ModuleState{Ready: boot == e.cfg.BootID}
	}
	for _, m := range e.cfg.RequiredModules {
		st := out[m]
		st.Required = true
		out[m] = st
	}
	return out, nil
}

// Counts is store.Counts, for the status of modules.
func (e *Engine) Counts() ([]store.Count, error) { return e.cfg.Store.Counts() }
