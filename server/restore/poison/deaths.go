package poison

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/store"
)

// Death is a death of vswitchd during a watched replay, to be recorded.
type Death struct {
	probe bool // the replay sent a probe back
	cause deathCause
}

// Death says whether the end of the OpenFlow connection, with w the watch
// it ended (TakeWatch), is a death to record (step 1): the replay failed on
// it, vswitchd died, and no evidence shows a kill from outside. It reads
// the evidence and may wait a few seconds, so it is called without the
// bridge's lock.
func (t *Tracker) Death(ctx context.Context, w Watch, log *slog.Logger) (Death, bool) {
	if w.at.IsZero() || !w.failed || w.vswitchd == "" {
		return Death{}, false
	}
	if !vswitchdGone(ctx, t.cfg.Vswitchd, w.vswitchd) {
		return Death{}, false
	}
	cause, why := t.cfg.Evidence.cause(ctx, w)
	if cause == causeKilled {
		t.cfg.Metrics.Kills.WithLabelValues(t.bridge).Inc()
		log.Warn("ovs-vswitchd was killed from outside during a replay: not counted as a crash", "evidence", why)
		return Death{}, false
	}
	log.Info("ovs-vswitchd died during a replay", "cause", cause, "evidence", why)
	return Death{probe: w.probe, cause: cause}, true
}

// RecordDeath records a death of vswitchd after a replay (steps 1, 3, 4,
// 6); quarantined says which entries the switch does not hold.
func (t *Tracker) RecordDeath(d Death, quarantined func(k string) bool, log *slog.Logger) error {
	return t.recordDeath(d.probe, d.cause, quarantined, log)
}

func (t *Tracker) recordDeath(probe bool, cause deathCause, quarantined func(k string) bool, log *slog.Logger) error {
	if err := t.load(); err != nil {
		return err
	}
	rec := t.rec
	now := time.Now()
	t.cfg.Metrics.Deaths.WithLabelValues(t.bridge).Inc()
	if probe && rec.Probe != nil {
		log.Error("ovs-vswitchd died after a replay that sent suspects back: one of them crashes it; the next replay holds them out",
			"suspects_ranges", len(rec.Suspects))
		probeCrashed(&rec, cause == causeCrash)
		if err := t.narrow(&rec, log); err != nil {
			return err
		}
		return t.save(rec)
	}
	deaths := rec.Deaths[:0:0]
	for _, d := range rec.Deaths {
		if now.Sub(d) <= t.cfg.CrashWindow {
			deaths = append(deaths, d)
		}
	}
	rec.Deaths = append(deaths, now)
	if len(rec.Deaths) < 2 {
		log.Warn("ovs-vswitchd died during or shortly after a replay; a second death in the window holds out the entries changed since the last replay it survived",
			"window", t.cfg.CrashWindow)
		return t.save(rec)
	}
	widen := len(rec.Suspects) > 0 || rec.Probe != nil
	dirtyMap := make([]byte, digestBuckets/8)
	if rec.Survived != nil && !widen {
		// What the crashed replay did not send cannot have crashed it.
		cur, err := digest(t.cfg.Desired, t.bridge, func(k string) bool { return quarantined(k) || poisonedAt(&rec, []byte(k)) >= 0 })
		if err != nil {
			return err
		}
		for i := range digestBuckets {
			if !bytes.Equal(cur[8*i:8*i+8], rec.Survived[8*i:min(8*i+8, len(rec.Survived))]) {
				dirtyMap[i/8] |= 1 << (i % 8)
			}
		}
	} else {
		for i := range dirtyMap {
			dirtyMap[i] = 0xff
		}
	}
	rec.Deaths, rec.Dirty, rec.Probe, rec.Since = nil, dirtyMap, nil, now
	// Evidence of a crash: the suspects are believed bad, probes halve
	// them. None: all of them are probed first, and come back at once if
	// the deaths were kills from outside.
	rec.Suspects = []store.SuspectRange{{Bad: cause == causeCrash}}
	n, _, _, err := t.countSuspects(&rec, rec.Suspects[0])
	if err != nil {
		return err
	}
	if n == 0 {
		// Nothing changed since the last survived replay: the cause is
		// not a change, hold out everything.
		for i := range dirtyMap {
			dirtyMap[i] = 0xff
		}
		widen = true
		if n, _, _, err = t.countSuspects(&rec, rec.Suspects[0]); err != nil {
			return err
		}
	}
	if cause == causeCrash {
		// The replays that crashed sent every suspect: with a crash as
		// their cause, the range is proven as a probe's would be, and a
		// lone suspect is named now (an entry costs two crashes).
		rec.Suspects[0].Died, rec.Suspects[0].Crashed = n, true
	}
	what := "the entries changed since the last replay it survived"
	if widen || t.rec.Survived == nil {
		what = "every entry (no survived replay to compare with, or the earlier suspects were not the cause)"
	}
	log.Error("ovs-vswitchd died twice during or shortly after a replay: the next replays hold out the suspects and bisect them across restarts",
		"suspects", n, "drawn_from", what)
	t.publish(events.Event{Type: events.EntryQuarantined, Bridge: t.bridge,
		Message: fmt.Sprintf("ovs-vswitchd died twice during or shortly after a replay: %d suspects (%s) held out and bisected across restarts", n, what),
		Attrs:   map[string]string{"reason": ReasonSuspect, "entries": strconv.Itoa(n)}})
	if err := t.narrow(&rec, log); err != nil {
		return err
	}
	return t.save(rec)
}

// Survived is called when vswitchd stayed up SurviveAfter after a replay
// that sent something: the digest of the switch (the desired entries but
// the quarantined ones) is kept, the deaths forgotten, a probe under way
// committed, and the next probe started (steps 2, 4).
func (t *Tracker) Survived(quarantined func(k string) bool, log *slog.Logger) error {
	if t.watch.at.IsZero() || t.watch.failed {
		return nil
	}
	probe := t.TakeWatch().probe
	if err := t.load(); err != nil {
		return err
	}
	rec := t.rec
	d, err := digest(t.cfg.Desired, t.bridge, quarantined)
	if err != nil {
		return err
	}
	rec.Survived, rec.Deaths = d, nil
	t.cfg.Metrics.Survived.WithLabelValues(t.bridge).Inc()
	log.Info("ovs-vswitchd survived the replay: the digest of what the switch holds is kept", "after", t.cfg.SurviveAfter)
	if probe && rec.Probe != nil && len(rec.Suspects) > 0 {
		probeSurvived(&rec)
		log.Info("ovs-vswitchd survived the suspects sent back: they are restored", "suspect_ranges_left", len(rec.Suspects))
		if err := t.narrow(&rec, log); err != nil {
			return err
		}
	}
	if len(rec.Suspects) > 0 && rec.Probe == nil {
		if err := t.nextProbe(&rec, log); err != nil {
			return err
		}
	}
	return t.save(rec)
}
