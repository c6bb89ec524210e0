package restore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/store"
)

// bridge is the engine's view of one bridge. mu serialises everything that
// talks to the switch or reads the desired state for it (replays, writes), so
// a write never slips between a replay's read of the store and its bundle.
type bridge struct {
	name string
	kick chan struct{}

	mu        sync.Mutex
	conn      *ofconn.Conn // nil while disconnected
	converged bool
	last      Replay

	// status is a copy of the fields above, published after every change, so
	// Status never waits for a replay in progress.
	status atomic.Pointer[BridgeStatus]
}

// publishLocked snapshots the state for readers; b.mu must be held.
func (b *bridge) publishLocked() {
	b.status.Store(&BridgeStatus{Name: b.name, Connected: b.conn != nil, Converged: b.conn != nil && b.converged, Last: b.last})
}

func (b *bridge) snapshot() BridgeStatus {
	if s := b.status.Load(); s != nil {
		return *s
	}
	return BridgeStatus{Name: b.name}
}

func (b *bridge) setConn(c *ofconn.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.conn = c
	b.converged = false
	b.publishLocked()
}

func (b *bridge) isConverged() bool { return b.snapshot().Converged }

// requestReplay asks the bridge goroutine for a replay; it never blocks.
func (b *bridge) requestReplay() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Replay describes one reconciliation of a bridge.
type Replay struct {
	Finished time.Time
	Duration time.Duration
	// Entries is the number of desired entries.
	Entries int
	// Adds, Modifies and Deletes count the flow_mods sent.
	Adds, Modifies, Deletes int
	// Bytes is the size of the messages sent in the bundle.
	Bytes int
	Err   error
}

// Messages is the number of messages the replay sent in its bundle.
func (r Replay) Messages() int { return r.Adds + r.Modifies + r.Deletes }

// reconcile makes the switch hold exactly the desired state of b:
//
//  1. Read the desired entries from the store.
//  2. Dump the switch's flows.
//  3. Diff by identity and canonical bytes: flows nobody declared (the default
//     NORMAL flow included) are deleted, changed ones re-added, missing ones
//     added. No difference: nothing is sent.
//  4. Send deletes then adds in one ORDERED|ATOMIC bundle.
func (e *Engine) reconcile(ctx context.Context, b *bridge, conn *ofconn.Conn, log *slog.Logger) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := time.Now()
	r, err := e.replayLocked(ctx, b, conn)
	r.Finished = time.Now()
	r.Duration = r.Finished.Sub(start)
	r.Err = err
	b.last = r
	b.converged = err == nil
	b.publishLocked()
	e.cfg.Metrics.observeReplay(b.name, r)
	if err != nil {
		return err
	}
	log.Info("replay finished", "entries", r.Entries, "adds", r.Adds, "modifies", r.Modifies,
		"deletes", r.Deletes, "bytes", r.Bytes, "duration", r.Duration)
	return nil
}

func (e *Engine) replayLocked(ctx context.Context, b *bridge, conn *ofconn.Conn) (Replay, error) {
	var r Replay
	desired, err := e.cfg.Store.Entries(b.name)
	if err != nil {
		return r, err
	}
	r.Entries = len(desired)
	actual, err := conn.DumpFlows(ctx)
	if err != nil {
		return r, fmt.Errorf("dump flows: %w", err)
	}
	msgs, d := diffFlows(desired, actual)
	r.Adds, r.Modifies, r.Deletes = d.adds, d.modifies, d.deletes
	if len(msgs) == 0 {
		return r, nil
	}
	for _, m := range msgs {
		r.Bytes += len(m)
	}
	if err := conn.Bundle(ctx, msgs); err != nil {
		return r, fmt.Errorf("bundle of %d messages: %w", len(msgs), err)
	}
	return r, nil
}

type diffCounts struct{ adds, modifies, deletes int }

// diffFlows returns the messages that turn actual into desired: strict deletes
// first, then adds (an ADD of an existing identity replaces its content).
func diffFlows(desired []entry.Entry, actual []ofconn.Flow) ([]ofconn.Message, diffCounts) {
	var c diffCounts
	want := make(map[string][]byte, len(desired))
	for _, d := range desired {
		if d.Kind == entry.KindFlow {
			want[string(d.ID)] = d.Payload
		}
	}
	var dels, adds []ofconn.Message
	have := make(map[string]bool, len(actual))
	for _, a := range actual {
		payload, id, err := canonicalDumped(a)
		if err != nil {
			// A flow we cannot decode was not declared by anyone (declared
			// flows decode): delete it by its raw table, priority and match.
			dels = append(dels, entry.DeleteFlowByMatch(a.Table(), a.Priority(), a.MatchBytes()))
			c.deletes++
			continue
		}
		have[string(id)] = true
		w, ok := want[string(id)]
		switch {
		case !ok:
			dels = append(dels, entry.DeleteFlowStrict(payload))
			c.deletes++
		case !bytes.Equal(w, payload):
			adds = append(adds, w)
			c.modifies++
		}
	}
	for _, d := range desired {
		if d.Kind == entry.KindFlow && !have[string(d.ID)] {
			adds = append(adds, d.Payload)
			c.adds++
		}
	}
	return append(dels, adds...), c
}

// canonicalDumped turns a dumped flow into its canonical ADD bytes and
// identity, the form desired entries are stored in.
func canonicalDumped(f ofconn.Flow) (payload, id []byte, err error) {
	if f.Desc == nil {
		return nil, nil, fmt.Errorf("undecodable flow: %w", f.Err)
	}
	b, err := ofconn.FlowModFromDesc(f.Desc).MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	payload, id, err = entry.Identify(entry.KindFlow, b)
	return payload, id, err
}

// Put stores es as entries of module on bridge. While the bridge is connected
// and converged, the entries go to the switch in one bundle first and are
// stored only if it accepted them (applied is true). Otherwise they are stored
// for the next replay.
func (e *Engine) Put(ctx context.Context, bridgeName, module string, es []entry.Entry) (applied bool, err error) {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	conn := b.conn
	live := conn != nil && b.converged
	err = e.cfg.Store.Put(bridgeName, module, es, func() error {
		if !live {
			return nil
		}
		msgs := make([]ofconn.Message, len(es))
		for i, en := range es {
			msgs[i] = en.Payload
		}
		return e.sendLocked(ctx, b, conn, msgs, &live)
	})
	if err != nil {
		return false, err
	}
	if !live {
		b.requestReplay()
	}
	return live, nil
}

// Delete removes entries of module on bridge by identity (keys carry Kind and
// ID), from the switch and the store together, like Put.
func (e *Engine) Delete(ctx context.Context, bridgeName, module string, keys []entry.Entry) (applied bool, n int, err error) {
	b, err := e.bridge(bridgeName)
	if err != nil {
		return false, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	conn := b.conn
	live := conn != nil && b.converged
	err = e.cfg.Store.Delete(bridgeName, module, keys, func(removed []entry.Entry) error {
		n = len(removed)
		if !live {
			return nil
		}
		msgs := make([]ofconn.Message, 0, len(removed))
		for _, r := range removed {
			if r.Kind == entry.KindFlow {
				msgs = append(msgs, entry.DeleteFlowStrict(r.Payload))
			}
		}
		return e.sendLocked(ctx, b, conn, msgs, &live)
	})
	if err != nil {
		return false, 0, err
	}
	if !live {
		b.requestReplay()
	}
	return live, n, nil
}

// sendLocked applies msgs in one bundle. A rejection by OVS is the caller's
// error (ErrInvalidArgument naming the entry). A lost connection is not: the
// change is then stored unapplied (*live = false) and the next replay
// converges the switch, so controllers are never blocked by an OVS restart.
func (e *Engine) sendLocked(ctx context.Context, b *bridge, conn *ofconn.Conn, msgs []ofconn.Message, live *bool) error {
	if len(msgs) == 0 {
		return nil
	}
	err := conn.Bundle(ctx, msgs)
	if err == nil {
		return nil
	}
	var be *ofconn.BundleError
	if errors.As(err, &be) {
		return rejection(be)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b.converged = false
	b.publishLocked()
	*live = false
	e.log.Warn("write not applied, will be replayed", "bridge", b.name, "err", err)
	return nil
}

// rejection turns OVS's refusal of a request's bundle into an error naming the
// first refused entry (bundle adds are in request order).
func rejection(be *ofconn.BundleError) error {
	err := fmt.Errorf("rejected by ovs-vswitchd: %w: %w", be, errdefs.ErrInvalidArgument)
	if len(be.Failed) == 0 || be.Failed[0].Index < 0 {
		return err
	}
	return &errdefs.EntryError{Index: be.Failed[0].Index, Err: err}
}

// BridgeStatus is the state of one bridge.
type BridgeStatus struct {
	Name      string
	Connected bool
	Converged bool
	Last      Replay
}

// Status returns the state of every managed bridge, in flag order.
func (e *Engine) Status() []BridgeStatus {
	out := make([]BridgeStatus, 0, len(e.order))
	for _, name := range e.order {
		out = append(out, e.bridges[name].snapshot())
	}
	return out
}

// Counts is store.Counts, for the status of modules.
func (e *Engine) Counts() ([]store.Count, error) { return e.cfg.Store.Counts() }
