package restore

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
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
//     that table after the refused one (siblingRefusals): the table stays
//     full for them, as nothing in a plan deletes flows after the adds.
//  3. Rebuild and resend while each round quarantines something new, for at
//     most Config.MaxReplayTime.

// prediction is an entry a pre-check expects the switch to refuse.
type prediction struct {
	entry  entry.Entry
	reason string
}

// predictRefusals returns, by key, the desired entries not in skip that the
// switch would refuse at the commit of the plan for desired, actual and skip:
//
//   - a flow that uses a group or meter that is neither desired (and not
//     skipped) nor left on the switch by the plan (OVS: OFPBAC_BAD_OUT_GROUP,
//     OFPMMFC_INVALID_METER);
//   - a flow added to a table beyond its flow_limit, with overflow_policy
//     refuse (OFPFMFC_TABLE_FULL). Flows the switch already holds and keeps
//     count against the limit and stay; of the flows to add, those first in
//     key order (priority, then match) fill the room left, the rest are
//     predicted refused. Tables with overflow_policy evict are not checked:
//     vswitchd makes room there by deleting flows with timeouts, and refuses
//     only when none is left, which step 2 above handles.
func predictRefusals(desired []entry.Entry, actual []actualEntry, skip map[string]bool, limits []ovsconfig.TableLimit) map[string]prediction {
	preds := map[string]prediction{}
	cs := diff(desired, actual, skip)
	deleted := make(map[string]bool)
	for _, c := range cs {
		if c.Op == OpDelete {
			deleted[key(c.Kind, changeID(c))] = true
		}
	}

	// Groups and meters on the switch once the plan is applied.
	declared := make(map[string]bool)
	exists := make(map[string]bool)
	for _, a := range actual {
		if k := key(a.kind, a.id); a.kind != entry.KindFlow && !deleted[k] {
			exists[k] = true
		}
	}
	for _, d := range desired {
		k := key(d.Kind, d.ID)
		declared[k] = true
		if d.Kind != entry.KindFlow && !skip[k] {
			exists[k] = true
		}
	}
	for _, d := range desired {
		k := key(d.Kind, d.ID)
		if d.Kind != entry.KindFlow || skip[k] {
			continue
		}
		for _, r := range entry.FlowRefs(d.Payload) {
			rk := key(r.Kind, r.Key())
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
			preds[k] = prediction{entry: d, reason: fmt.Sprintf("%s (predicted): uses %s, which is %s", ovsErr, r, why)}
			break
		}
	}

	refuse := make(map[uint8]int)
	for _, l := range limits {
		if !l.Evict {
			refuse[l.Table] = l.FlowLimit
		}
	}
	if len(refuse) == 0 {
		return preds
	}
	held := make(map[uint8]int)
	for _, a := range actual {
		k := key(a.kind, a.id)
		if a.kind != entry.KindFlow || deleted[k] {
			continue
		}
		if _, refused := preds[k]; refused {
			continue // a flow on the switch predicted refused is deleted by the plan
		}
		held[entry.FlowTable(a.id)]++
	}
	adds := make(map[uint8][]entry.Entry)
	for _, c := range cs {
		if c.Op != OpAdd || c.Kind != entry.KindFlow {
			continue
		}
		t := entry.FlowTable(c.Desired.ID)
		if _, limited := refuse[t]; !limited {
			continue
		}
		if _, refused := preds[key(c.Kind, c.Desired.ID)]; !refused {
			adds[t] = append(adds[t], c.Desired)
		}
	}
	for t, as := range adds {
		room := max(refuse[t]-held[t], 0)
		if len(as) <= room {
			continue
		}
		slices.SortFunc(as, func(a, b entry.Entry) int { return strings.Compare(string(a.ID), string(b.ID)) })
		reason := fmt.Sprintf("OFPFMFC_TABLE_FULL (predicted): table %d holds at most %d flows (Flow_Table flow_limit, overflow_policy refuse)", t, refuse[t])
		for _, d := range as[room:] {
			preds[key(d.Kind, d.ID)] = prediction{entry: d, reason: reason}
		}
	}
	return preds
}

// siblingRefusals returns the changes of p that the switch would refuse for
// the same cause as refused, which it reported as the first failure of the
// bundle: after an OFPFMFC_TABLE_FULL, every later add of a flow to that
// table. The plan deletes and modifies flows before it adds any (see diff
// and newPlan), so nothing after the refused add frees room or, with
// eviction, makes a flow evictable: the table stays full for them.
func siblingRefusals(p *plan, refused Change, reason string) []Change {
	if reason != "OFPFMFC_TABLE_FULL" || refused.Kind != entry.KindFlow || refused.Op != OpAdd {
		return nil
	}
	table := entry.FlowTable(refused.Desired.ID)
	var out []Change
	after := false
	for _, c := range p.bundle {
		if !after {
			after = c.Op == OpAdd && c.Kind == entry.KindFlow && string(c.Desired.ID) == string(refused.Desired.ID)
			continue
		}
		if c.Op == OpAdd && c.Kind == entry.KindFlow && entry.FlowTable(c.Desired.ID) == table {
			out = append(out, c)
		}
	}
	return out
}

// skipsLocked returns the keys the next round of a replay leaves out: the
// entries the switch refused, and the predicted refusals (see
// predictRefusals), which replace the predictions of the previous round in
// b's quarantine.
func (e *Engine) skipsLocked(b *bridge, desired []entry.Entry, actual []actualEntry, limits []ovsconfig.TableLimit, log *slog.Logger) map[string]bool {
	skip := make(map[string]bool, len(b.quarantine))
	for k, q := range b.quarantine {
		if !q.predicted {
			skip[k] = true
		}
	}
	preds := predictRefusals(desired, actual, skip, limits)
	released := 0
	for k, q := range b.quarantine {
		if _, still := preds[k]; q.predicted && !still {
			delete(b.quarantine, k)
			released++
		}
	}
	if released > 0 {
		log.Info("quarantine lifted: the cause of a predicted refusal is gone", "entries", released)
	}
	var fresh []Quarantined
	for k, p := range preds {
		skip[k] = true
		if q, ok := b.quarantine[k]; ok && q.Reason == p.reason {
			continue
		}
		fresh = append(fresh, Quarantined{Bridge: b.name, Entry: p.entry, Reason: p.reason, Since: time.Now(), predicted: true})
	}
	e.addQuarantineLocked(b, fresh, log)
	if released > 0 && len(fresh) == 0 {
		b.publishLocked()
	}
	return skip
}

// quarantineLocked records the desired entries re refused, and the changes
// of p the switch would refuse for the same cause (siblingRefusals); it
// reports false when there is nothing new to quarantine (the switch refused
// a delete), so the replay fails instead of looping.
func (e *Engine) quarantineLocked(b *bridge, re *RejectedError, p *plan, log *slog.Logger) bool {
	var fresh []Quarantined
	seen := map[string]bool{}
	add := func(c Change, reason string) {
		if c.Op == OpDelete {
			return
		}
		k := key(c.Kind, c.Desired.ID)
		if _, dup := b.quarantine[k]; dup || seen[k] {
			return
		}
		seen[k] = true
		fresh = append(fresh, Quarantined{Bridge: b.name, Entry: c.Desired, Reason: reason, Since: time.Now()})
	}
	for i, c := range re.Changes {
		add(c, re.Reasons[i])
		for _, s := range siblingRefusals(p, c, re.Reasons[i]) {
			add(s, fmt.Sprintf("%s (table %d was full at an earlier flow of the same bundle)", re.Reasons[i], entry.FlowTable(s.Desired.ID)))
		}
	}
	e.addQuarantineLocked(b, fresh, log)
	return len(fresh) > 0
}

// addQuarantineLocked puts qs in b's quarantine, counts them, and reports
// them with one log line and one event per module, kind and reason (a mass
// refusal must not flood the log or the event ring).
func (e *Engine) addQuarantineLocked(b *bridge, qs []Quarantined, log *slog.Logger) {
	if len(qs) == 0 {
		return
	}
	if b.quarantine == nil {
		b.quarantine = make(map[string]Quarantined, len(qs))
	}
	type cause struct {
		module string
		kind   entry.Kind
		reason string
	}
	count := map[cause]int{}
	for _, q := range qs {
		b.quarantine[key(q.Entry.Kind, q.Entry.ID)] = q
		count[cause{q.Entry.Module, q.Entry.Kind, q.Reason}]++
	}
	e.cfg.Metrics.quarantined.WithLabelValues(b.name).Add(float64(len(qs)))
	causes := make([]cause, 0, len(count))
	for c := range count {
		causes = append(causes, c)
	}
	slices.SortFunc(causes, func(a, b cause) int {
		return cmp.Or(strings.Compare(a.module, b.module), cmp.Compare(a.kind, b.kind), strings.Compare(a.reason, b.reason))
	})
	for _, c := range causes {
		n := count[c]
		log.Error("entries quarantined: the switch refuses them; the rest of the replay goes on without them",
			"kind", c.kind, "module", c.module, "entries", n, "reason", c.reason)
		what := c.kind.String()
		if n > 1 {
			what = fmt.Sprintf("%d %ss", n, c.kind)
		}
		e.publish(events.Event{Type: events.EntryQuarantined, Bridge: b.name, Module: c.module,
			Message: fmt.Sprintf("%s of module %s refused by the switch: %s", what, c.module, c.reason),
			Attrs:   map[string]string{"kind": c.kind.String(), "reason": c.reason, "entries": strconv.Itoa(n)}})
	}
	b.publishLocked()
}
