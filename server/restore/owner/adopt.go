package owner

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ofproxy"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// Learning what a relayed controller did.
//
// While flowstated is away its guard relays the OpenFlow proxy's socket
// straight to vswitchd (server/guard, relay.go), unrecorded: the controller
// behind it installs on the switch what the store does not know (a new
// port's flows), and changes or deletes what the store holds. Replayed as
// usual, flowstated's first reconcile after it comes back would delete the
// one and put the others back until the controller, reconnected through
// flowstated, reinstalls: flows that vanish and change, worse than plain
// Open vSwitch. So when the guard left its evidence (guard.Relayed, handed
// over with AdoptRelayed), the first reconcile of the bridge learns the
// switch's state for the proxied module before it replays:
//
//   - an owned flow (group, meter) on the switch that no module declares
//     becomes the module's; a group or meter only when the engine owns them
//     all (OwnedCookie 0/0), or when a flow it learns uses it;
//   - the switch's version of an entry of the module replaces the store's;
//   - an entry of the module the switch lacks is removed from the store,
//     but only when flowstated's entries were on the bridge's switch: a
//     flowstated of this store last replayed the bridge on it, the same
//     vswitchd and the same bridge in it (placed.go, entriesOn); so the
//     controller deleted what is gone. A vswitchd that started while
//     flowstated was away never held them, nor a bridge deleted and
//     created again meanwhile; what it lacks, it lacks because it
//     restarted or was re-created, and the store keeps it (the
//     controller's reinstall through flowstated, a resync, deletes what it
//     no longer wants);
//   - entries of other modules are not the controller's: they are replayed
//     as usual, as are entries left alone (kept.go) and flows outside the
//     owned cookie space (cookie.go). What the relay's unrecorded sessions
//     (an OpenFlow 1.3 controller on the same socket) installed is left
//     alone: the guard notes it (guard.RelayedKept) and the learning first
//     tells the bridge's Kept.
//
// vswitchd's default flow (table 0, priority 0, no match, NORMAL, cookie 0)
// undeclared is not learned: a standalone bridge gets it at every vswitchd
// start, so it tells nothing of the controller, and the engine deletes it as
// it always has. A controller that wants it declares it again when it
// reconnects, and one that had declared it before keeps it (it is declared).
//
// The learning is moot, and the store is replayed as usual, when: vswitchd
// is not the one the guard last relayed to (it restarted since: the relayed
// flows are gone); vswitchd is held (flow-restore-wait: learning must never
// hold the node longer); the switch holds nothing but the default flow; or a
// controller connected through flowstated's proxy before the first reconcile
// (its writes are in the store already, and its resync reconciles). A
// learning that cannot be stored (disk full) is logged and the store is
// replayed as usual. Each case takes the evidence into account (taken): the
// learning happens at most once per handover.
//
// The learning is a write like any other (write/adopt.go): the replay hands
// it (Learning) to the bridge's write queue before it takes the bridge's
// lock, and waits for it. The queue's owner runs it alone, in the write
// transaction, under the bridge's lock: Learning.Learn decides whether it
// is moot and compares the switch with the store, the transaction stores
// what it found in one store transaction and lifts its quarantine, and
// Learning.Stored ends it, taking the evidence only once the store's
// outcome is known.

// adoption is a pending learning of a bridge's relayed controller.
type adoption struct {
	Relayed
	module string

	mu    sync.Mutex
	state adoptionState
}

type adoptionState int

const (
	adoptionPending adoptionState = iota
	adoptionStarted
	adoptionDone
)

// to moves a from one state to another, reporting whether it was in from.
func (a *adoption) to(from, to adoptionState) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != from {
		return false
	}
	a.state = to
	return true
}

// finish ends a for good and takes its evidence into account.
func (a *adoption) finish() {
	a.mu.Lock()
	done := a.state == adoptionDone
	a.state = adoptionDone
	a.mu.Unlock()
	if !done && a.Taken != nil {
		a.Taken()
	}
}

// Relayed is the guard's evidence of a bridge's relayed sessions
// (guard.Relayed), for AdoptRelayed.
type Relayed struct {
	// Vswitchd is the vswitchd the guard last relayed to
	// (ovsconfig.VswitchdIdentity; "" unknown); Live the one that ran
	// when the guard last saw flowstated renew its lease ("" unknown).
	Vswitchd, Live string
	// Keep, when set, tells the bridge's Kept what the relay's
	// unrecorded sessions (not OpenFlow 1.5) installed under Vswitchd,
	// so that the learning leaves those entries alone instead of making
	// them the module's.
	Keep func(ofproxy.Keeper)
	// Taken is called once the learning was decided (learned, moot or
	// failed).
	Taken func()
}

// AdoptRelayed tells the engine that the guard relayed module's controller
// straight to bridge's switch while flowstated was away (rel): the bridge's
// first reconcile learns the switch's state for module instead of
// overwriting it (see Learning what a relayed controller did). Call it
// before Run.
func (ow *Owners) AdoptRelayed(bridge, module string, rel Relayed) error {
	b, err := ow.bridge(bridge)
	if err != nil {
		return err
	}
	if err := entry.ValidateName("module", module); err != nil {
		return fmt.Errorf("restore: adopt relayed: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if old := b.adopt.Swap(&adoption{Relayed: rel, module: module}); old != nil {
		old.finish()
	}
	return nil
}

// Learning is a bridge's pending learning, made as a write of the bridge's
// queue (write.Writes.Adopt, whose Adopter it is) before a replay reads the
// desired state on conn. Learn and Stored run in that write's transaction,
// under the bridge's lock: Learn decides whether the learning is moot and
// compares the switch with the store; the write stores what it found, and
// Stored ends the learning once the store's outcome is known, so that the
// guard's evidence is taken only then.
type Learning struct {
	ow   *Owners
	b    *bridgeOwner
	a    *adoption
	conn *ofconn.Conn
	log  *slog.Logger
	// started: Learn started a (it was pending) and did not put it back;
	// found is what it learned.
	started bool
	found   learned
}

// Learning returns the pending learning of bridge, for the replay about to
// run on conn; nil when none is pending.
func (ow *Owners) Learning(bridge string, conn *ofconn.Conn, log *slog.Logger) *Learning {
	b := ow.bridges[bridge]
	a := b.adopt.Load()
	if a == nil {
		return nil
	}
	return &Learning{ow: ow, b: b, a: a, conn: conn, log: log.With("module", a.module)}
}

// Learn runs the learning, unless it is no longer pending (a controller
// connected, another replay took it): the module's entries to store (see
// write.Adopter). Only an error of the switch (a dump) is returned, and
// leaves the learning pending for the next connection's reconcile; every
// other outcome ends it (Stored).
func (l *Learning) Learn(ctx context.Context) (module string, puts, removed []entry.Entry, err error) {
	ow, b, a, log := l.ow, l.b, l.a, l.log
	if !a.to(adoptionPending, adoptionStarted) {
		return a.module, nil, nil, nil
	}
	l.started = true
	now := ow.cfg.Vswitchd.Identity()
	if a.Vswitchd != "" && now != "" && now != a.Vswitchd {
		log.Info("vswitchd restarted since the guard relayed the controller: nothing of it to learn, replaying the store", "relayed_to", a.Vswitchd, "vswitchd", now)
		return a.module, nil, nil, nil
	}
	if a.Keep != nil {
		a.Keep(&keeper{ow: ow, b: b, log: log})
	}
	held, known, released := ow.cfg.Flag.HeldReleased()
	if known && held {
		log.Warn("vswitchd is held (flow-restore-wait): not learning what the controller installed through the guard's relay, replaying the store")
		return a.module, nil, nil, nil
	}
	// The switch's lacks are the controller's deletions only on a
	// vswitchd that held the store's entries (placed.go); one that
	// started while flowstated was away lacks them because it restarted.
	placed, err := ow.cfg.Store.Placed().Vswitchd(b.Name())
	if err != nil {
		log.Warn("the vswitchd the bridge's entries were replayed on is unknown: not learning the controller's deletions", "err", err)
	}
	// The bridge's switch, not only the vswitchd: a br-int deleted and
	// created again under the same vswitchd while flowstated was away is
	// empty, and what it lacks is no deletion either.
	sw := ow.cfg.Vswitchd.BridgeIdentity(b.Name())
	ours := err == nil && entriesOn(now, sw, placed, a.Live, released)
	if !ours {
		log.Info("the store's entries were not on this vswitchd: learning what the controller installed through the guard's relay, not what the switch lacks",
			"vswitchd", now, "switch", sw, "placed", placed, "live", a.Live, "released", released)
	}
	// What a resync of the module held back from the switch (store.Ahead):
	// the switch's copy of such an entry is flowstated's, not the
	// controller's doing. Unreadable, the switch's copies cannot be told
	// from the controller's changes: the store's acknowledged state stands.
	ahead, err := ow.cfg.Store.Ahead().Of(b.Name(), a.module)
	if err != nil {
		log.Error("the record of what a resync held back from the switch is unreadable: not learning what the controller installed through the guard's relay, replaying the store", "err", err)
		return a.module, nil, nil, nil
	}
	found, err := ow.learnRelayed(ctx, b, l.conn, a.module, ours, ahead)
	if err != nil {
		a.to(adoptionStarted, adoptionPending)
		l.started = false
		return a.module, nil, nil, err
	}
	l.found = found
	switch {
	case found.fresh:
		log.Info("the switch holds nothing the relayed controller installed (vswitchd's default flow at most): replaying the store")
	case found.added+found.changed+len(found.removed) == 0:
		log.Debug("the controller installed nothing new through the guard's relay")
	default:
		return a.module, found.puts, found.removed, nil
	}
	return a.module, nil, nil, nil
}

// Stored ends the learning Learn started with the store's outcome err: a
// learning that cannot be stored (disk full) is logged, and the replay
// goes on, replaying the store as usual.
func (l *Learning) Stored(err error) error {
	if !l.started {
		return nil
	}
	l.started = false
	f := l.found
	switch {
	case err != nil:
		l.log.Error("cannot store what the controller installed through the guard's relay: replaying the store over it until the controller reinstalls", "err", err)
	case !f.fresh && f.added+f.changed+len(f.removed) > 0:
		l.log.Info("learned what the controller installed through the guard's relay while flowstated was away",
			"added", f.added, "changed", f.changed, "removed", len(f.removed), "resync_held", f.held)
	}
	l.b.adopt.CompareAndSwap(l.a, nil)
	l.a.finish()
	return nil
}

// learned is what a switch holds for a relayed module against the store.
type learned struct {
	// puts are the entries the module declares anew (added) or in the
	// switch's version (changed); removed the module's entries the switch
	// lacks (Kind and ID).
	puts           []entry.Entry
	removed        []entry.Entry
	added, changed int
	// held counts the switch's copies a resync of the module held back
	// (store.Ahead): the store's version stands.
	held int
	// fresh: the switch holds no owned entry but vswitchd's default flow.
	fresh bool
}

// learnRelayed compares what b's switch holds with the store, for module
// (see Learning what a relayed controller did); removals only when the
// store's entries were on this vswitchd (removals).
func (ow *Owners) learnRelayed(ctx context.Context, b *bridgeOwner, conn *ofconn.Conn, module string, removals bool, ahead map[string]store.AheadDigest) (learned, error) {
	var l learned
	kf := ow.keptFilter(b)
	// The owned flows as a dump keeps them (package replay): outside the
	// cookie space, with timeouts, left alone: not the module's.
	flows := make(map[string][]byte)
	var id []byte
	err := plan.EachFlowMod(ctx, conn, ow.cfg.OwnedCookie, func(m []byte, owned bool) {
		if !owned {
			return
		}
		id = entry.AppendFlowID(id[:0], m)
		if !kf.Leaves(entry.KindFlow, id) {
			flows[string(id)] = bytes.Clone(m)
		}
	})
	if err != nil {
		return l, err
	}
	others, err := plan.DumpGroupsMeters(ctx, conn)
	if err != nil {
		return l, err
	}
	others = leftOut(others, kf)
	kf.Done()
	l.fresh = len(others) == 0
	for _, m := range flows {
		if !canon.IsDefaultFlow(m) {
			l.fresh = false
			break
		}
	}
	if l.fresh {
		return l, nil
	}
	// ahead: the switch's copies a resync of the module held back.
	resyncs := func(kind entry.Kind, id, m []byte) bool {
		d, ok := ahead[plan.Key(kind, id)]
		return ok && d == store.DigestOf(m)
	}
	err = ow.cfg.Store.Entries().ScanFlows(b.Name(), nil, func(rec store.Record) error {
		m, on := flows[string(rec.ID)]
		mine := string(rec.Module) == module
		switch {
		case !on && mine && removals:
			l.removed = append(l.removed, entry.Entry{Kind: entry.KindFlow, ID: bytes.Clone(rec.ID)})
		case on && mine && resyncs(entry.KindFlow, rec.ID, m):
			l.held++
		case on && mine && !bytes.Equal(ow.cfg.Forms.Form(rec.Payload), m):
			d, err := declaredFlow(module, m)
			if err != nil {
				return err
			}
			l.changed++
			l.puts = append(l.puts, d)
		}
		delete(flows, string(rec.ID)) // declared: not undeclared
		return nil
	})
	if err != nil {
		return l, err
	}
	uses := make(map[string]bool)
	for sid, m := range flows {
		if canon.IsDefaultFlow(m) {
			continue
		}
		if resyncs(entry.KindFlow, []byte(sid), m) {
			l.held++ // cleared and not declared again: leaves the switch at the replay
			continue
		}
		d, err := declaredFlow(module, m)
		if err != nil {
			return l, err
		}
		l.added++
		l.puts = append(l.puts, d)
	}
	for _, p := range l.puts {
		for _, r := range entry.FlowRefs(p.Payload) {
			uses[plan.Key(r.Kind, r.Key())] = true
		}
	}
	return l, ow.learnOthers(b.Name(), module, others, uses, removals, resyncs, &l)
}

// learnOthers adds to l the groups and meters of the switch (others) and
// of the store for module; uses holds the keys of those the learned flows
// use.
func (ow *Owners) learnOthers(bridge, module string, others []plan.ActualEntry, uses map[string]bool, removals bool,
	resyncs func(kind entry.Kind, id, m []byte) bool, l *learned) error {
	on := make(map[string]plan.ActualEntry, len(others))
	for _, a := range others {
		on[plan.Key(a.Kind, a.ID)] = a
	}
	for _, k := range []entry.Kind{entry.KindGroup, entry.KindMeter} {
		err := ow.cfg.Store.Entries().List(store.Filter{Bridge: bridge, Kind: k}, func(_ string, d entry.Entry) error {
			kk := plan.Key(d.Kind, d.ID)
			a, ok := on[kk]
			delete(on, kk)
			switch {
			case d.Module != module:
			case !ok && !removals:
			case !ok:
				l.removed = append(l.removed, entry.Entry{Kind: d.Kind, ID: d.ID})
			case resyncs(a.Kind, a.ID, a.Payload):
				l.held++
			case !bytes.Equal(ow.cfg.Forms.Form(d.Payload), a.Payload):
				l.changed++
				l.puts = append(l.puts, entry.Entry{Kind: a.Kind, Module: module, ID: a.ID, Payload: a.Payload})
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for kk, a := range on {
		if resyncs(a.Kind, a.ID, a.Payload) {
			l.held++
			continue
		}
		if ow.cfg.OwnedCookie.All() || uses[kk] {
			l.added++
			l.puts = append(l.puts, entry.Entry{Kind: a.Kind, Module: module, ID: a.ID, Payload: a.Payload})
		}
	}
	return nil
}

// declaredFlow is module's declaration of m, a flow the switch holds.
func declaredFlow(module string, m []byte) (entry.Entry, error) {
	payload, id, err := entry.Identify(entry.KindFlow, m)
	if err != nil {
		return entry.Entry{}, fmt.Errorf("restore: a flow the relayed controller installed: %w", err)
	}
	return entry.Entry{Kind: entry.KindFlow, Module: module, ID: id, Payload: payload}, nil
}

// leftOut returns others without the entries kf leaves alone.
func leftOut(others []plan.ActualEntry, kf *KeptFilter) []plan.ActualEntry {
	out := others[:0]
	for _, a := range others {
		if !kf.Leaves(a.Kind, a.ID) {
			out = append(out, a)
		}
	}
	return out
}

// ControllerConnected tells that a controller connected through flowstated's proxy:
// a learning of the bridge not yet started is moot (its writes go to the
// store, and its reinstall reconciles).
func (ow *Owners) ControllerConnected(bridge, module string) {
	b, err := ow.bridge(bridge)
	if err != nil {
		return
	}
	a := b.adopt.Load()
	if a == nil || a.module != module || !a.to(adoptionPending, adoptionDone) {
		return
	}
	b.adopt.CompareAndSwap(a, nil)
	ow.log.Info("the controller reconnected through flowstated's proxy before the bridge's first replay: its reinstall, recorded, replaces what it installed through the guard's relay",
		"bridge", bridge, "module", module)
	if a.Taken != nil {
		a.Taken()
	}
}
