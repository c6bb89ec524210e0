package restore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/store"
)

// A staged write is a Put or Sync too large to hold in memory: the request
// arrives as a store.Spool (sorted runs on disk), and store.Stage builds the
// bridge's new flow bucket beside the old one in bounded transactions. It
// goes through the bridge's write queue like any write, but alone
// (runWrites), and under b.mu from staging to commit, so no other write or
// replay of the bridge slips between them:
//
//  1. While the bridge is live, a bundle opens with the staging (as a
//     streamed write, writestream.go) and each change goes to the switch as
//     the store decides it; removals of a Sync go where the merge finds
//     them (flows need no order among themselves).
//  2. Staging done, the bundle is committed; only then the store swaps the
//     staged bucket in (Staged.Commit). The switch refusing an entry, or the
//     store refusing the request (an identity another module owns, a
//     duplicate, a group nobody declared), discards both: nothing changes.
//  3. A switch that fails otherwise (the connection died, the reply to
//     COMMIT was lost, the bundle refused as a whole) does not fail the
//     write: it is stored and the bridge replays, which makes the switch
//     equal to the store, as for any write.
//
// A request with groups or meters, or a Sync of a module that declares
// some on the bridge (store.ErrNotStageable), is read back from the spool
// and written the usual way.

// CheckDeclared checks entries es of a write request before they are
// spooled (see checkOwned); base is the position of es[0] in the request.
func (e *Engine) CheckDeclared(es []entry.Entry, base int) error {
	err := e.checkOwned(es)
	var ee *errdefs.EntryError
	if errors.As(err, &ee) {
		ee.Index += base
	}
	return err
}

// PutSpool is Put for a request held in a spool. It takes sp: the spool is
// closed once the write is done with it, which may be after PutSpool
// returned (its caller gave up while the write was under way).
func (e *Engine) PutSpool(ctx context.Context, bridgeName, module string, sp *store.Spool) (applied bool, err error) {
	r, err := e.submit(ctx, bridgeName, e.stagedReq(bridgeName, module, sp, false))
	return r.applied, err
}

// SyncSpool is Sync for a request held in a spool; it takes sp, as PutSpool.
func (e *Engine) SyncSpool(ctx context.Context, bridgeName, module string, sp *store.Spool, ready bool) (SyncResult, error) {
	return e.syncWrite(ctx, bridgeName, module, e.stagedReq(bridgeName, module, sp, true), ready)
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

// stagedReq is the write request of a spooled Put or Sync. unstage turns it
// into a usual request, for what the store cannot stage.
func (e *Engine) stagedReq(bridgeName, module string, sp *store.Spool, sync bool) *writeReq {
	r := &writeReq{staged: &store.StagedWrite{Bridge: bridgeName, Module: module, Sync: sync, Spool: sp},
		release: func() { _ = sp.Close() }}
	r.unstage = func() error {
		if n := sp.Len(); n > maxUnstaged {
			return errUnstagedTooLarge(n)
		}
		es, err := sp.Entries(module)
		if err != nil {
			return err
		}
		r.staged, r.declared, r.flowsOnly, r.sync = nil, es, flowsOnly(es), sync
		r.op = func(w *store.Writer) (store.Result, error) {
			if sync {
				return w.Sync(bridgeName, module, es)
			}
			return w.Put(bridgeName, module, es)
		}
		return nil
	}
	return r
}

// maxUnstaged bounds a request the store cannot stage, which is read back
// into memory at about 1.2 KB an entry: 500,000 entries hold about 600 MB,
// what the deployed 1 GiB limit leaves room for beside the store's pages
// (docs/operations.md, "Sizing"). A larger one would be OOM-killed halfway
// and fail again at every retry; it fails at once instead, naming the way
// out. A variable for the tests.
var maxUnstaged = 500_000

func errUnstagedTooLarge(n int) error {
	return fmt.Errorf("%d entries in one request that declares groups or meters (or a Sync of a module that declares some) exceed the limit of %d for such a request, "+
		"which is written in memory: declare the groups and meters under a module of their own, so that the flows are staged on disk whatever their number: %w",
		n, maxUnstaged, errdefs.ErrInvalidArgument)
}

// commitStaged runs staged request r (see above). fallback says the store
// cannot stage it: r is then to be written the usual way (writeReq.unstage).
func (e *Engine) commitStaged(ctx context.Context, b *bridge, r *writeReq) (res writeResult, fallback bool) {
	e.cfg.Metrics.writeBatches.WithLabelValues(b.name).Inc()
	defer b.busy()()
	b.mu.Lock()
	defer b.mu.Unlock()
	var touched, stored bool
	defer func() {
		if err := e.endWrite(b, recover(), "a staged write", touched, stored, res.err); err != nil {
			res, fallback = writeResult{err: err}, false
		}
	}()

	start := time.Now()
	conn := b.conn
	live := conn != nil && b.converged && e.gate.isOpen() && ctx.Err() == nil
	w := *r.staged
	var stream *writeStream
	var at []int32      // the request index behind each bundle position, -1 for a removal
	var opaque []Change // for learnForms
	if live {
		bound, err := e.cfg.Store.StageBound(w)
		if err != nil {
			return writeResult{err: err}, false
		}
		sctx, cancel := context.WithTimeout(ctx, e.cfg.WriteTimeout)
		defer cancel()
		stream = startStream(sctx, conn, bound, func(idx []int) ([]Change, error) {
			out := make([]Change, len(idx))
			for i, x := range idx {
				if x < 0 || x >= len(at) {
					return nil, fmt.Errorf("restore: bundle position %d is past the %d staged changes", x, len(at))
				}
				out[i] = Change{Op: OpAdd, Kind: entry.KindFlow, Index: int(at[x])}
				if at[x] < 0 {
					out[i].Op = OpDelete
				}
			}
			return out, nil
		})
		defer func() {
			if stream != nil {
				_ = stream.finish(false)
			}
		}()
		w.Changed = func(sc store.Change) {
			c := writeChange(sc)
			at = append(at, int32(sc.Index))
			stream.add(c)
			if sc.Entry.Opaque {
				opaque = append(opaque, c)
			}
		}
		w.Removed = func(en entry.Entry) {
			at = append(at, -1)
			stream.add(Change{Op: OpDelete, Kind: en.Kind, Actual: en.Payload, Index: -1})
		}
	}
	// The quarantined entries the request declares are forgotten once it is
	// stored, as for any write: the switch tells again whether it takes
	// them.
	var unquarantine []string
	if len(b.quarantine) > 0 {
		w.Declared = func(kind entry.Kind, id []byte) {
			k := key(kind, id)
			if _, q := b.quarantine[k]; q {
				unquarantine = append(unquarantine, k)
			}
		}
	}
	staged, err := e.cfg.Store.Stage(w)
	if errors.Is(err, store.ErrNotStageable) {
		return writeResult{}, true
	}
	if err != nil {
		return writeResult{err: err}, false
	}
	defer func() {
		if !stored {
			if err := staged.Discard(); err != nil {
				e.log.Warn("dropping a staged write failed; the next start drops it", "bridge", b.name, "err", err)
			}
		}
	}()
	var unknown error
	if stream != nil {
		touched = true
		if stream.fallback {
			// More changes than the bound: cannot happen, the bound
			// counts every flow either side may hold.
			return writeResult{err: fmt.Errorf("bridge %s: a staged write outgrew its bundle: %w", b.name, errdefs.ErrInternal)}, false
		}
		err := stream.finish(true)
		stream = nil
		if e.faults.streamVerdict != nil {
			err = e.faults.streamVerdict(err)
		}
		if err == nil && e.faults.afterBundle != nil {
			err = e.faults.afterBundle()
		}
		var re *RejectedError
		switch {
		case errors.As(err, &re) && len(re.Changes) > 0:
			touched = re.SwitchChanged
			return writeResult{err: rejection(re)}, false
		case err != nil:
			// Refused as a whole, or the outcome is unknown: stored, and
			// the replay makes the switch equal to the store.
			unknown, live = err, false
		case e.faults.beforeStoreCommit != nil:
			if err := e.faults.beforeStoreCommit(); err != nil {
				return writeResult{err: err}, false
			}
		}
	}
	if err := staged.Commit(); err != nil {
		return writeResult{err: err}, false
	}
	stored = true
	e.cfg.Metrics.stagedWrites.WithLabelValues(b.name).Inc()
	if len(unquarantine) > 0 {
		for _, k := range unquarantine {
			delete(b.quarantine, k)
		}
		b.publishLocked()
	}
	switch {
	case unknown != nil:
		e.divergedLocked(b, "staged write stored, its outcome on the switch is unknown", unknown)
	case !live:
		b.requestReplay()
	case len(opaque) > 0:
		lctx, cancel := context.WithTimeout(ctx, e.cfg.WriteTimeout)
		e.learnForms(lctx, conn, opaque, false, e.log.With("bridge", b.name))
		cancel()
	}
	e.log.Info("staged write stored", "bridge", b.name, "module", w.Module, "sync", w.Sync, "entries", w.Spool.Len(),
		"added", staged.Added, "changed", staged.Changed, "removed", staged.Removed, "applied", live, "took", time.Since(start))
	return writeResult{applied: live, staged: staged}, false
}
