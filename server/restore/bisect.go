package restore

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/store"
)

// The bisection of the suspects (poison.go, steps 4 and 5). Its one rule of
// soundness: an entry is named as crashing vswitchd only when vswitchd
// crashed on a replay that sent it, and every other suspect that replay
// sent was since sent again and survived (SuspectRange.Died == 1). A range
// is proven (Died > 0) only by a crash: a probe's death, or two deaths of
// full replays the evidence shows to be crashes; deaths no evidence
// explains (an operator's kill -9, the OOM killer) leave it merely
// believed bad, and its last entry is sent alone before it is named.

// countSuspects counts the suspects of rec in r, and returns the key of the
// middle one (index n/2) and the key of the first.
func (e *Engine) countSuspects(bridge string, rec *store.CrashRecord, r store.SuspectRange) (n int, mid, first []byte, err error) {
	var keys [][]byte
	err = e.eachDesired(bridge, func(k []byte, _ string, _ []byte) error {
		if inRange(k, r) && dirty(rec.Dirty, k) && poisonedAt(rec, k) < 0 {
			keys = append(keys, bytes.Clone(k))
		}
		return nil
	})
	if err != nil || len(keys) == 0 {
		return 0, nil, nil, err
	}
	return len(keys), keys[len(keys)/2], keys[0], nil
}

// narrow drops the empty ranges of rec and names the entries whose probe
// alone died (step 5), until the first range needs a probe; when none is
// left, the bisection is over.
func (e *Engine) narrow(b *bridge, rec *store.CrashRecord, log *slog.Logger) error {
	for len(rec.Suspects) > 0 {
		r := rec.Suspects[0]
		n, _, first, err := e.countSuspects(b.name, rec, r)
		if err != nil {
			return err
		}
		switch {
		case n == 0:
			rec.Suspects = rec.Suspects[1:]
			continue
		case r.Bad && r.Died == 1 && n == 1:
			d, _, err := e.cfg.Store.Entries().Get(b.name, entry.Kind(first[0]), first[1:])
			if err != nil {
				return err
			}
			name := describeForLog(d)
			rec.Poisoned = append(rec.Poisoned, store.PoisonedEntry{Key: first, Sum: sumHash(first, d.Payload), Module: d.Module, Name: name})
			rec.Suspects = rec.Suspects[1:]
			log.Error("entry quarantined: it crashes ovs-vswitchd (vswitchd died on a replay that sent it alone, found by bisection across restarts); kept out until its module changes or deletes it",
				"kind", d.Kind, "module", d.Module, "entry", name)
			e.publish(events.Event{Type: events.EntryQuarantined, Bridge: b.name, Module: d.Module,
				Message: fmt.Sprintf("%s of module %s crashes ovs-vswitchd, quarantined: %s", d.Kind, d.Module, name),
				Attrs:   map[string]string{"kind": d.Kind.String(), "reason": reasonPoisoned, "entries": "1", "entry": name}})
			e.cfg.Metrics.poisoned.WithLabelValues(b.name, d.Module, name).Set(1)
			continue
		}
		break
	}
	if len(rec.Suspects) == 0 {
		rec.Dirty, rec.Since = nil, time.Time{}
	}
	return nil
}

// nextProbe starts the probe of the first range of rec (step 4): the first
// half of a Bad range of more than one suspect, all of any other.
func (e *Engine) nextProbe(b *bridge, rec *store.CrashRecord, log *slog.Logger) error {
	r := rec.Suspects[0]
	n, mid, _, err := e.countSuspects(b.name, rec, r)
	if err != nil {
		return err
	}
	p := store.SuspectRange{Lo: r.Lo, Hi: r.Hi, Died: n}
	if r.Bad && n > 1 {
		p.Hi, p.Died = mid, n/2
	}
	rec.Probe = &p
	log.Warn("sending suspects of crashing ovs-vswitchd back to the switch, watched", "suspects_in_range", n,
		"sent", p.Died, "bad_range", r.Bad)
	b.requestReplay()
	return nil
}

// probeCrashed narrows rec after vswitchd died on its probe (step 4): the
// range the probe sent is Bad, and proven so (Died); the rest of the range
// it came from is no longer known to hold anything bad.
func (e *Engine) probeCrashed(rec *store.CrashRecord, crashed bool) {
	p := *rec.Probe
	rec.Probe = nil
	if len(rec.Suspects) == 0 {
		return
	}
	r := rec.Suspects[0]
	if bytes.Equal(p.Hi, r.Hi) {
		rec.Suspects[0].Bad, rec.Suspects[0].Died, rec.Suspects[0].Crashed = true, p.Died, crashed
		return
	}
	rest := store.SuspectRange{Lo: p.Hi, Hi: r.Hi}
	rec.Suspects = slices.Insert(rec.Suspects[1:], 0, store.SuspectRange{Lo: r.Lo, Hi: p.Hi, Bad: true, Died: p.Died, Crashed: crashed}, rest)
}

// probeSurvived commits the probe of rec vswitchd survived (step 4): its
// entries are no longer suspects. What is left of a Bad range stays Bad;
// of one a crash proved (Crashed), proven still: the crash sent what is
// left, and what the probe sent is harmless.
func probeSurvived(rec *store.CrashRecord) {
	p, r := *rec.Probe, rec.Suspects[0]
	rec.Probe = nil
	if bytes.Equal(p.Hi, r.Hi) {
		rec.Suspects = rec.Suspects[1:]
		return
	}
	rest := &rec.Suspects[0]
	rest.Lo, rest.Died = p.Hi, 0
	if r.Crashed {
		rest.Died = max(r.Died-p.Died, 0)
	}
}
