package replay

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// How a replay finds every entry the switch refuses.
//
// A refusal at add time (parsing, validation) comes back for every
// BUNDLE_ADD at once. A refusal at commit time does not: ofproto's
// do_bundle_commit stops at the first message that fails, rolls the bundle
// back and reports that message only, and a bundle that is never committed
// reveals nothing of commit time (a BUNDLE_ADD is only parsed). So one
// bundle tells at most one commit-time refusal, and a switch that refuses
// thousands of entries would take thousands of rounds. Three steps keep a
// mass refusal to one or two rounds:
//
//  1. Predict, before the bundle, the refusals whose cause is known
//     (predictRefusals): flows that use a group or meter that will not be on
//     the switch (absent from the desired set, or quarantined), and flows
//     added beyond a table's flow_limit in OVSDB. Predictions are derived
//     again at every replay, so their entries come back as soon as the cause
//     is gone (the group is declared, the limit raised).
//  2. Widen a commit-time OFPFMFC_TABLE_FULL to the flows the bundle adds to
//     that table after the refused one (flowScan.siblings): the table stays
//     full for them, as nothing in a plan deletes flows after the adds.
//  3. Rebuild and resend while each round quarantines something new, for at
//     most Config.MaxReplayTime.

// prediction is an entry a pre-check expects the switch to refuse, or that
// the crash-loop protection holds out (package poison).
type prediction struct {
	kind   entry.Kind
	module string
	reason string
}

// predictRefusals returns, by key, the desired entries not in fs.skip that
// the switch of fs would refuse at the commit of the plan that leaves out
// fs.skip:
//
//   - a flow that uses a group or meter that is neither desired (and not
//     skipped) nor left on the switch by the plan (OVS: OFPBAC_BAD_OUT_GROUP,
//     OFPMMFC_INVALID_METER); the users come from the store's refs index;
//   - a flow added to a table beyond its flow_limit, with overflow_policy
//     refuse (OFPFMFC_TABLE_FULL). Flows the switch already holds and keeps
//     (foreign ones too) count against the limit and stay; of the flows to
//     add, those first in identity order (priority, then match) fill the
//     room left, the rest are predicted refused. Tables with overflow_policy
//     evict are not checked: vswitchd makes room there by deleting flows
//     with timeouts, and refuses only when none is left, which step 2 above
//     handles.
func (fs *flowScan) predictRefusals(others []entry.Entry, limits []ovsconfig.TableLimit) (map[string]prediction, error) {
	preds := map[string]prediction{}
	deleted := make(map[string]bool)
	for _, c := range plan.Diff(others, fs.compared(others), fs.skip) {
		if c.Op == plan.OpDelete {
			deleted[plan.Key(c.Kind, c.ID())] = true
		}
	}

	// Groups and meters on the switch once the plan is applied.
	declared := make(map[string]bool)
	exists := make(map[string]bool)
	for _, a := range fs.sw.others {
		if k := plan.Key(a.Kind, a.ID); !deleted[k] {
			exists[k] = true
		}
	}
	for _, d := range others {
		k := plan.Key(d.Kind, d.ID)
		declared[k] = true
		if !fs.skip[k] {
			exists[k] = true
		}
	}
	targets, err := fs.store.Entries().RefTargets(fs.bridge)
	if err != nil {
		return nil, err
	}
	for _, r := range targets {
		rk := plan.Key(r.Kind, r.Key())
		if exists[rk] {
			continue
		}
		why := "neither declared nor on the switch"
		if declared[rk] {
			why = "quarantined"
		}
		ovsErr := "OFPBAC_BAD_OUT_GROUP"
		if r.Kind == entry.KindMeter {
			ovsErr = "OFPMMFC_INVALID_METER"
		}
		reason := fmt.Sprintf("%s (predicted): uses %s, which is %s", ovsErr, r, why)
		var users [][]byte
		err := fs.store.Entries().EachUser(fs.bridge, r, func(id []byte) error {
			if k := plan.Key(entry.KindFlow, id); !fs.skip[k] && preds[k].reason == "" {
				users = append(users, bytes.Clone(id))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, id := range users {
			d, ok, err := fs.store.Entries().Get(fs.bridge, entry.KindFlow, id)
			if err != nil {
				return nil, err
			}
			if ok {
				preds[plan.Key(entry.KindFlow, id)] = prediction{kind: entry.KindFlow, module: d.Module, reason: reason}
			}
		}
	}

	for _, l := range limits {
		if l.Evict {
			continue
		}
		if err := fs.predictFull(l, preds); err != nil {
			return nil, err
		}
	}
	return preds, nil
}

// predictFull adds to preds the flows the plan of fs adds to table l.Table
// beyond its flow limit (see predictRefusals).
func (fs *flowScan) predictFull(l ovsconfig.TableLimit, preds map[string]prediction) error {
	t := l.Table
	// scan calls fn for the desired flows of the table that the plan keeps,
	// saying whether the switch holds them.
	scan := func(fn func(held bool, rec store.Record)) error {
		return fs.store.Entries().ScanFlows(fs.bridge, []byte{t}, func(rec store.Record) error {
			if entry.FlowTable(rec.ID) != t {
				return store.StopScan
			}
			if _, predicted := preds[plan.Key(entry.KindFlow, rec.ID)]; predicted || fs.skipped(rec.ID) {
				return nil
			}
			fn(fs.sw.lookup(rec.ID, rec.Payload, false) != plan.OpAdd, rec)
			return nil
		})
	}
	held, adds := fs.sw.foreignIn[t], 0
	err := scan(func(on bool, _ store.Record) {
		if on {
			held++
		} else {
			adds++
		}
	})
	room := max(l.FlowLimit-held, 0)
	if err != nil || adds <= room {
		return err
	}
	reason := fmt.Sprintf("OFPFMFC_TABLE_FULL (predicted): table %d holds at most %d flows (Flow_Table flow_limit, overflow_policy refuse)", t, l.FlowLimit)
	n := 0
	modules := map[string]string{} // one string per module, not per flow
	return scan(func(on bool, rec store.Record) {
		if on {
			return
		}
		if n++; n > room {
			m, ok := modules[string(rec.Module)]
			if !ok {
				m = string(rec.Module)
				modules[m] = m
			}
			preds[plan.Key(entry.KindFlow, rec.ID)] = prediction{kind: entry.KindFlow, module: m, reason: reason}
		}
	})
}

// skipsLocked sets fs.skip to the keys the next round of a replay leaves
// out: the entries the switch refused, and the predicted refusals (see
// predictRefusals), which replace the predictions of the previous round in
// b's quarantine.
func (rp *Replayer) skipsLocked(b *bridge.State, fs *flowScan, others []entry.Entry, limits []ovsconfig.TableLimit, log *slog.Logger) error {
	skip := make(map[string]bool, b.Quarantine().Len())
	b.Quarantine().Each(func(k string, predicted bool) bool {
		if !predicted {
			skip[k] = true
		}
		return true
	})
	fs.skip = skip
	held, err := poisonHeldLocked(b)
	if err != nil {
		return err
	}
	for k := range held {
		skip[k] = true
	}
	preds, err := fs.predictRefusals(others, limits)
	if err != nil {
		return err
	}
	for k, p := range held {
		preds[k] = p
	}
	var gone []string
	b.Quarantine().Each(func(k string, predicted bool) bool {
		if _, still := preds[k]; predicted && !still {
			gone = append(gone, k)
		}
		return true
	})
	b.LiftQuarantineLocked(gone)
	released := len(gone)
	if released > 0 {
		log.Info("quarantine lifted: the cause of a predicted refusal is gone", "entries", released)
	}
	var fresh []bridge.Quarantining
	for k, p := range preds {
		skip[k] = true
		if reason, _, ok := b.Quarantine().Reason(k); ok && reason == p.reason {
			continue
		}
		fresh = append(fresh, bridge.Quarantining{Key: k, Kind: p.kind, Module: p.module, Reason: p.reason, Predicted: true})
	}
	rp.addQuarantineLocked(b, fresh, log)
	if released > 0 && len(fresh) == 0 {
		b.PublishLocked()
	}
	return nil
}

// quarantineSkips returns the keys a diff leaves out: the quarantined
// entries, and the desired flows that use a quarantined group or meter (the
// switch would refuse them). A replay derives the latter as predicted
// refusals instead (predictRefusals), which also lists them.
func (rp *Replayer) quarantineSkips(bridge string, q *bridge.Quarantine) (map[string]bool, error) {
	skip := make(map[string]bool, q.Len())
	var refs []entry.Ref
	q.Each(func(k string, _ bool) bool {
		skip[k] = true
		if kind := entry.Kind(k[0]); kind != entry.KindFlow && len(k) == 5 {
			refs = append(refs, entry.Ref{Kind: kind, ID: binary.BigEndian.Uint32([]byte(k[1:]))})
		}
		return true
	})
	for _, r := range refs {
		err := rp.cfg.Store.Entries().EachUser(bridge, r, func(id []byte) error {
			skip[plan.Key(entry.KindFlow, id)] = true
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return skip, nil
}

// quarantineLocked records the desired entries re refused, and the changes
// the switch would refuse for the same cause (siblings); it reports false
// when there is nothing new to quarantine (the switch refused a delete), so
// the replay fails instead of looping.
func (rp *Replayer) quarantineLocked(b *bridge.State, re *plan.RejectedError, siblings func(plan.Change, string) ([]plan.Change, error), log *slog.Logger) (bool, error) {
	var fresh []bridge.Quarantining
	seen := map[string]bool{}
	add := func(c plan.Change, reason string) {
		if c.Op == plan.OpDelete {
			return
		}
		k := plan.Key(c.Kind, c.Desired.ID)
		if b.Quarantine().Has(k) || seen[k] {
			return
		}
		seen[k] = true
		fresh = append(fresh, bridge.Quarantining{Key: k, Kind: c.Kind, Module: c.Desired.Module, Reason: reason})
	}
	// The reason names the vswitchd that refused by its version: another
	// may take the entry (a new connection lifts the quarantine).
	by := rp.cfg.Rooms.Vswitchd()
	for i, c := range re.Changes {
		add(c, fmt.Sprintf("%s (refused by %s)", re.Reasons[i], by))
		sibs, err := siblings(c, re.Reasons[i])
		if err != nil {
			return false, err
		}
		for _, s := range sibs {
			add(s, fmt.Sprintf("%s (refused by %s: table %d was full at an earlier flow of the same bundle)", re.Reasons[i], by, entry.FlowTable(s.Desired.ID)))
		}
	}
	rp.addQuarantineLocked(b, fresh, log)
	return len(fresh) > 0, nil
}

// addQuarantineLocked puts qs in b's quarantine, counts them, and reports
// them with one log line and one event per module, kind and reason (a mass
// refusal must not flood the log or the event ring).
func (rp *Replayer) addQuarantineLocked(b *bridge.State, qs []bridge.Quarantining, log *slog.Logger) {
	if len(qs) == 0 {
		return
	}
	type cause struct {
		module string
		kind   entry.Kind
		reason string
	}
	count := map[cause]int{}
	now := time.Now()
	for _, q := range qs {
		count[cause{q.Module, q.Kind, q.Reason}]++
	}
	b.QuarantineLocked(qs, now)
	rp.cfg.Metrics.Quarantined.WithLabelValues(b.Name()).Add(float64(len(qs)))
	causes := make([]cause, 0, len(count))
	for c := range count {
		causes = append(causes, c)
	}
	slices.SortFunc(causes, func(a, b cause) int {
		return cmp.Or(strings.Compare(a.module, b.module), cmp.Compare(a.kind, b.kind), strings.Compare(a.reason, b.reason))
	})
	for _, c := range causes {
		n := count[c]
		log.Error("entries quarantined: the switch refuses them, or would, or they crash it; the rest of the replay goes on without them",
			"kind", c.kind, "module", c.module, "entries", n, "reason", c.reason)
		what := c.kind.String()
		if n > 1 {
			what = fmt.Sprintf("%d %ss", n, c.kind)
		}
		rp.cfg.Publish(events.Event{Type: events.EntryQuarantined, Bridge: b.Name(), Module: c.module,
			Message: fmt.Sprintf("%s of module %s quarantined: %s", what, c.module, c.reason),
			Attrs:   map[string]string{"kind": c.kind.String(), "reason": c.reason, "entries": strconv.Itoa(n)}})
	}
}
