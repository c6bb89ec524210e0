package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/forms"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// replayPlan is what a replay sends, in a sendOrder's order (meters; one
// bundle of groups added or modified, flows deleted, flows added or
// modified, groups deleted; meter deletes), except that the flows to add or modify stay in
// the store: they are counted by one scan and read again, in identity order,
// while the bundle is written. Everything else is small: groups, meters, and
// the flows to delete (after a restart, the default flow).
type replayPlan struct {
	pre, post                     []plan.Change
	groupsIn, flowDels, groupDels []plan.Change
	adds, modifies                int
	// foreignFlows are flows outside the owned cookie space brought back
	// from the bridge's mirror after a restart (foreign.go): adds and
	// modifies after the declared ones (their deletes are in flowDels).
	foreignFlows []plan.Change
	// entries counts the desired entries.
	entries int
}

func (p *replayPlan) sets() int { return p.adds + p.modifies }

func (p *replayPlan) bundleLen() int {
	return len(p.groupsIn) + len(p.flowDels) + p.sets() + len(p.foreignFlows) + len(p.groupDels)
}

func (p *replayPlan) len() int { return len(p.pre) + p.bundleLen() + len(p.post) }

// switchVersions reads again from the switch the flows a diff shows changed
// whose dump kept only a hash (more than keepFlows on the switch), so the
// diff shows both versions of each.
func (rp *Replayer) switchVersions(ctx context.Context, conn *ofconn.Conn, fs *flowScan) error {
	if fs.sw.complete {
		return nil
	}
	want := make(map[flowKey]bool)
	_, err := fs.each(nil, false, func(op plan.Op, rec store.Record) error {
		if op == plan.OpModify {
			if k := fs.sw.key(rec.ID); fs.sw.kept[k] == nil {
				want[k] = true
			}
		}
		return nil
	})
	if err != nil || len(want) == 0 {
		return err
	}
	fs.actual = make(map[flowKey][]byte, len(want))
	var id []byte
	return plan.EachFlowMod(ctx, conn, rp.cfg.OwnedCookie, func(m []byte, owned bool) {
		if !owned {
			return
		}
		id = entry.AppendFlowID(id[:0], m)
		if k := fs.sw.key(id); want[k] {
			fs.actual[k] = bytes.Clone(m)
		}
	})
}

// newFlowScan reads b's desired flows against sw, leaving out skip.
func (rp *Replayer) newFlowScan(b *bridge.State, sw *switchState, skip map[string]bool) *flowScan {
	return &flowScan{store: rp.cfg.Store, bridge: b.Name(), sw: sw, skip: skip,
		keepUndeclared: !rp.cfg.OwnedCookie.All(), forms: rp.cfg.Forms}
}

// desiredOthers returns the desired groups and meters of bridge.
func (rp *Replayer) desiredOthers(bridge string) ([]entry.Entry, error) {
	var out []entry.Entry
	for _, k := range []entry.Kind{entry.KindGroup, entry.KindMeter} {
		err := rp.cfg.Store.Entries().List(store.Filter{Bridge: bridge, Kind: k}, func(_ string, d entry.Entry) error {
			out = append(out, d)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return rp.cfg.Forms.Apply(out), nil
}

// planReplay builds the plan that makes the switch of fs hold the desired
// state, leaving out fs.skip, and adds the foreign entries to restore.
func (rp *Replayer) planReplay(ctx context.Context, conn *ofconn.Conn, fs *flowScan, others []entry.Entry, foreign []plan.Change) (*replayPlan, error) {
	gm := plan.NewSendOrder(append(plan.Diff(others, fs.compared(others), fs.skip), foreign...))
	p := &replayPlan{pre: gm.Pre, post: gm.Post}
	for _, c := range gm.Bundle {
		if c.Kind == entry.KindFlow && c.Op == plan.OpDelete {
			p.flowDels = append(p.flowDels, c)
		} else if c.Kind == entry.KindFlow {
			p.foreignFlows = append(p.foreignFlows, c)
		}
	}
	for _, c := range gm.Bundle {
		switch {
		case c.Kind == entry.KindFlow:
		case c.Op == plan.OpDelete:
			p.groupDels = append(p.groupDels, c)
		default:
			p.groupsIn = append(p.groupsIn, c)
		}
	}
	same, err := fs.sameFlows()
	if err != nil {
		return nil, err
	}
	if same {
		// The switch holds exactly the desired flows: nothing to add,
		// modify or delete among them.
		p.entries = fs.sw.desired.read + len(others)
		return p, nil
	}
	fs.sw.pass++
	n, err := fs.each(nil, true, func(op plan.Op, _ store.Record) error {
		if op == plan.OpAdd {
			p.adds++
		} else {
			p.modifies++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.entries = n + len(others)
	dels, err := rp.unseen(ctx, conn, fs.sw)
	if err != nil {
		return nil, err
	}
	var a, b []byte
	slices.SortFunc(dels, func(x, y []byte) int {
		a, b = entry.AppendFlowID(a[:0], x), entry.AppendFlowID(b[:0], y)
		return bytes.Compare(a, b)
	})
	for _, d := range dels {
		p.flowDels = append(p.flowDels, plan.Change{Op: plan.OpDelete, Kind: entry.KindFlow, Actual: d, Index: -1})
	}
	return p, nil
}

// source is the bundle of p, made from the store as it is written. Flows
// and deletes are one message each; a group may take several.
func (p *replayPlan) source(fs *flowScan) plan.BundleSource {
	groups := plan.ChangesSource(p.groupsIn)
	g, d, s, f := groups.N, len(p.flowDels), p.sets(), len(p.foreignFlows)
	one := func(emit func(ofconn.Message) error, cs []plan.Change) error {
		for _, c := range cs {
			if err := emit(c.Messages()[0]); err != nil {
				return err
			}
		}
		return nil
	}
	return plan.BundleSource{
		N: g + d + s + f + len(p.groupDels),
		Produce: func(emit func(ofconn.Message) error) error {
			if err := groups.Produce(emit); err != nil {
				return err
			}
			if err := one(emit, p.flowDels); err != nil {
				return err
			}
			if s > 0 {
				// An ADD of an existing identity replaces its content.
				fs.learn = fs.learn[:0]
				_, err := fs.each(nil, false, func(op plan.Op, rec store.Record) error {
					if op == plan.OpModify && canon.Opaque(entry.KindFlow, rec.Payload) {
						fs.learn = append(fs.learn, plan.Change{Op: op, Kind: entry.KindFlow, Desired: recordEntry(rec), Index: -1})
					}
					return emit(rec.Payload)
				})
				if err != nil {
					return err
				}
			}
			if err := one(emit, p.foreignFlows); err != nil {
				return err
			}
			return one(emit, p.groupDels)
		},
		At: func(idx []int) ([]plan.Change, error) {
			out := make([]plan.Change, len(idx))
			sets := map[int]int{} // position among the flow sets -> position in out
			for i, x := range idx {
				switch {
				case x < g:
					c, err := groups.At([]int{x})
					if err != nil {
						return nil, err
					}
					out[i] = c[0]
				case x < g+d:
					out[i] = p.flowDels[x-g]
				case x < g+d+s:
					sets[x-g-d] = i
				case x < g+d+s+f:
					out[i] = p.foreignFlows[x-g-d-s]
				default:
					out[i] = p.groupDels[x-g-d-s-f]
				}
			}
			if len(sets) == 0 {
				return out, nil
			}
			k := 0
			_, err := fs.each(nil, false, func(op plan.Op, rec store.Record) error {
				if i, ok := sets[k]; ok {
					out[i] = plan.Change{Op: op, Kind: entry.KindFlow, Desired: recordEntry(rec), Index: -1}
				}
				k++
				return nil
			})
			return out, err
		},
	}
}

// each calls fn for every change of p, in the order a replay sends them.
func (p *replayPlan) each(fs *flowScan, fn func(plan.Change) error) error {
	for _, cs := range [][]plan.Change{p.pre, p.groupsIn, p.flowDels} {
		for _, c := range cs {
			if err := fn(c); err != nil {
				return err
			}
		}
	}
	if p.sets() > 0 {
		_, err := fs.each(nil, false, func(op plan.Op, rec store.Record) error {
			return fn(plan.Change{Op: op, Kind: entry.KindFlow, Desired: recordEntry(rec), Actual: fs.actualOf(op, rec.ID), Index: -1})
		})
		if err != nil {
			return err
		}
	}
	for _, cs := range [][]plan.Change{p.groupDels, p.post} {
		for _, c := range cs {
			if err := fn(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// replayLocked makes the switch hold the desired state of b (see Reconcile).
func (rp *Replayer) replayLocked(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) (plan.Replay, error) {
	var r plan.Replay
	start := time.Now()
	others, err := rp.desiredOthers(b.Name())
	if err != nil {
		return r, err
	}
	// The TLV table first: the flows the dump and the bundle meet may
	// use its fields (write/tlv.go).
	if err := rp.cfg.Rooms.RestoreTLVLocked(ctx, b, conn, log); err != nil {
		return r, err
	}
	sw, err := rp.dumpSwitch(ctx, conn, b.Name())
	if err != nil {
		return r, err
	}
	defer func() { sw.releaseMemory() }()
	limits := rp.tableLimits(b.Name(), log)
	foreign, err := rp.foreignToRestore(b, rp.newFlowScan(b, sw, nil), others, log)
	if err != nil {
		return r, err
	}
	for {
		r.Rounds++
		fs := rp.newFlowScan(b, sw, nil)
		if err := rp.skipsLocked(b, fs, others, limits, log); err != nil {
			return r, err
		}
		p, err := rp.planReplay(ctx, conn, fs, others, foreign)
		if err != nil {
			return r, err
		}
		// Damage the plan's reads met was left out of it (damage.go).
		for _, k := range rp.noteDamageLocked(b, log) {
			fs.skip[k] = true
		}
		r.Entries = p.entries
		r.Count(slices.Concat(p.pre, p.groupsIn, p.flowDels, p.foreignFlows, p.groupDels, p.post))
		r.Adds, r.Modifies = r.Adds+p.adds, r.Modifies+p.modifies
		r.Quarantined = len(fs.skip)
		if p.len() == 0 {
			return r, nil
		}
		st, err := plan.ApplyChanges(ctx, conn, p.pre, p.source(fs), p.post)
		r.Messages, r.Bytes = st.Messages, st.Bytes
		if err == nil {
			forms.Learn(ctx, conn, rp.cfg.Forms, rp.cfg.Store.Forms(), slices.Concat(p.pre, p.groupsIn, fs.learn), true, log)
		}
		if err == nil && len(foreign) > 0 {
			b.SettleForeignLocked()
			log.Info("entries outside the owned cookie space restored from the mirror", "entries", len(foreign))
		}
		var re *plan.RejectedError
		if !errors.As(err, &re) {
			return r, err
		}
		if len(foreign) > 0 && slices.ContainsFunc(re.Changes, func(c plan.Change) bool { return c.Foreign }) {
			// What the switch held before, it takes again; if not, they
			// come back as the other controller makes them.
			log.Error("the switch refused the mirrored entries outside the owned cookie space; they come back as their controller makes them", "err", err)
			foreign = nil
			b.SettleForeignLocked()
			continue
		}
		fresh, serr := rp.quarantineLocked(b, re, fs.siblings, log)
		if serr != nil {
			return r, serr
		}
		if !fresh {
			return r, err
		}
		if spent := time.Since(start); spent > rp.cfg.MaxReplayTime {
			return r, fmt.Errorf("restore: the switch still refuses entries after %d rounds in %v (max replay time %v): %w",
				r.Rounds, spent.Round(time.Millisecond), rp.cfg.MaxReplayTime, err)
		}
		if len(p.pre) > 0 {
			// Meters may have been applied before the refusal: look again.
			if sw, err = rp.dumpSwitch(ctx, conn, b.Name()); err != nil {
				return r, err
			}
		}
	}
}

// Diff calls fn for every change a replay of b would send now, in order,
// under b's lock: fn must not wait long (the Diff RPC hands the changes to a
// sender through a bounded queue).
func (rp *Replayer) Diff(ctx context.Context, b *bridge.State, conn *ofconn.Conn, fn func(plan.Change) error) error {
	// An audit or a Diff stuck on a frozen switch holds the bridge as a
	// replay would: it counts for Wedged.
	defer b.Take()()
	others, err := rp.desiredOthers(b.Name())
	if err != nil {
		return err
	}
	sw, err := rp.dumpSwitch(ctx, conn, b.Name())
	if err != nil {
		return err
	}
	defer sw.releaseMemory()
	skip, err := rp.quarantineSkips(b.Name(), b.Quarantine())
	if err != nil {
		return err
	}
	fs := rp.newFlowScan(b, sw, skip)
	if b.ForeignSettledLocked() {
		rp.saveForeign(b, fs.foreignOf(others), rp.log.With("bridge", b.Name()))
	}
	p, err := rp.planReplay(ctx, conn, fs, others, nil)
	if err != nil {
		return err
	}
	if p.sets() > 0 {
		if err := rp.switchVersions(ctx, conn, fs); err != nil {
			return err
		}
	}
	return p.each(fs, fn)
}

// Reconcile makes the switch hold exactly the desired state of b:
//
//  1. Read the desired entries from the store; put back the TLV mappings
//     the switch lacks (write/tlv.go).
//  2. Dump the switch's flows, groups and meters.
//  3. Diff by identity and canonical bytes: entries nobody declared (the
//     default NORMAL flow included) are deleted, changed ones modified,
//     missing ones added, leaving out the quarantined entries and those the
//     switch would refuse (quarantine.go). No difference: nothing is sent.
//  4. Send meters, then one ORDERED|ATOMIC bundle, then meter deletes.
//  5. If the switch refused entries, quarantine them and go back to 3 without
//     them, for at most MaxReplayTime: one bad entry never leaves a node
//     without flows.
func (rp *Replayer) Reconcile(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) (plan.Replay, error) {
	if err := rp.cfg.Rooms.CheckOwner(b.Name()); err != nil {
		return plan.Replay{}, err
	}
	// What a controller installed through the guard's relay becomes its
	// module's before the desired state is read: a write, which takes the
	// bridge's lock and marks it busy itself (Rooms.LearnRelayed). Its
	// error (a dump's) fails the replay.
	learnErr := rp.cfg.Rooms.LearnRelayed(ctx, b, conn, log)
	defer b.Take()()
	rp.cfg.Publish(events.Event{Type: events.ReplayStarted, Bridge: b.Name(), Message: "replay started"})
	start := time.Now()
	begun := b.Poison().Begin()
	on := rp.cfg.Rooms.BridgeIdentity(b.Name())
	r, err := plan.Replay{}, learnErr
	if err == nil {
		r, err = rp.replayLocked(ctx, b, conn, log)
	}
	if err == nil {
		rp.notePlaced(b, on, log)
	}
	if r.Messages > 0 {
		replayWatchLocked(b, begun, err)
	}
	r.Finished = time.Now()
	r.Duration = r.Finished.Sub(start)
	r.Err = err
	b.ReplayedLocked(r)
	rp.cfg.Metrics.ObserveReplay(b.Name(), r)
	attrs := map[string]string{
		"entries": strconv.Itoa(r.Entries), "adds": strconv.Itoa(r.Adds), "modifies": strconv.Itoa(r.Modifies),
		"deletes": strconv.Itoa(r.Deletes), "bytes": strconv.Itoa(r.Bytes), "duration": r.Duration.String(),
		"quarantined": strconv.Itoa(r.Quarantined), "rounds": strconv.Itoa(r.Rounds),
	}
	if err != nil {
		attrs["error"] = err.Error()
		rp.cfg.Publish(events.Event{Type: events.ReplayFinished, Bridge: b.Name(), Message: "replay failed", Attrs: attrs})
		return r, err
	}
	rp.cfg.Publish(events.Event{Type: events.ReplayFinished, Bridge: b.Name(),
		Message: fmt.Sprintf("replay finished: %d changes in %v", r.Changes(), r.Duration.Round(time.Microsecond)), Attrs: attrs})
	if r.Changes() > 0 {
		log.Info("replay finished", "entries", r.Entries, "adds", r.Adds, "modifies", r.Modifies,
			"deletes", r.Deletes, "bytes", r.Bytes, "duration", r.Duration, "quarantined", r.Quarantined, "rounds", r.Rounds)
	}
	return r, nil
}

// tableLimits returns the flow limits OVSDB sets on bridge's tables, or none
// while OVSDB is not connected: the replay then finds a full table at commit
// (see siblingRefusals) instead of predicting it.
func (rp *Replayer) tableLimits(bridge string, log *slog.Logger) []ovsconfig.TableLimit {
	c := rp.cfg.Flag.OVSDB()
	if c == nil {
		return nil
	}
	limits, err := c.TableLimits(bridge)
	if err != nil {
		log.Debug("table limits unknown, not predicting full tables", "err", err)
		return nil
	}
	return limits
}
