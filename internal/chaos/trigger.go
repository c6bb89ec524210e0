package chaos

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// triggerWait bounds a step's wait for its trigger's event: past it the
// step is injected anyway and counted as missed.
const triggerWait = 15 * time.Second

// quietWait bounds an @quiet step's wait for the node at rest: longer than
// the longest lasting fault (a guard frozen or flowstated out, lastingBound
// and a drawn hold), so that a wait past it means something stays on.
const quietWait = lastingBound + 15*time.Second

// underWay bounds how long ago a replay an @restore step lands in began.
const underWay = 5 * time.Second

// signal wakes everyone waiting for the next occurrence of an event.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// next returns a channel closed at the next fire after this call.
func (s *signal) next() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
	}
	s.ch = make(chan struct{})
}

// span is one replay of br-int as flowstated's events tell it (end zero
// while it runs, or when its end was not seen).
type span struct{ start, end time.Time }

// waitTrigger waits for the next event t names, at most triggerWait, then
// for its offset; it counts the trigger as landed or missed.
func (r *run) waitTrigger(ctx context.Context, t Trigger) {
	if t.On == OnQuiet {
		r.rep.Faults.add("trigger @quiet", r.waitQuiet(ctx))
		sleepCtx(ctx, t.Offset)
		return
	}
	sig := &r.replays
	if t.On == OnResync {
		sig = &r.resyncs
	}
	next := sig.next()
	start := time.Now()
	if t.On == OnRestore {
		if at, ok := r.replayUnderWay(); ok {
			next, start = closed, at
		}
	}
	timer := time.NewTimer(triggerWait)
	defer timer.Stop()
	var err error
	select {
	case <-next:
		if next != closed {
			start = time.Now()
		}
	case <-timer.C:
		err = errors.New("missed: no event within the bound")
	case <-ctx.Done():
		return
	}
	r.rep.Faults.add("trigger @"+string(t.On), err)
	sleepCtx(ctx, time.Until(start.Add(t.Offset)))
	if (t.On == OnReplay || t.On == OnRestore) && err == nil {
		// A small replay ends within milliseconds, often before its
		// event reached the harness: count whether the step still
		// lands inside it.
		r.mu.Lock()
		ended := len(r.spans) > 0 && !r.spans[len(r.spans)-1].end.IsZero()
		r.mu.Unlock()
		r.rep.Faults.add("trigger @"+string(t.On)+", still replaying", errIf(ended))
	}
}

// waitQuiet waits, at most quietWait, until no lasting fault is on and
// flowstated, vswitchd (unfrozen) and a guard run.
func (r *run) waitQuiet(ctx context.Context) error {
	deadline := time.Now().Add(quietWait)
	for !r.quiet() {
		if time.Now().After(deadline) {
			return errors.New("missed: a fault still on past the bound")
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return nil
		}
	}
	return nil
}

// quiet reports the node at rest: see waitQuiet.
func (r *run) quiet() bool {
	if !r.n.alive() || r.n.sb.VswitchdPID() == 0 {
		return false
	}
	if pid := r.n.guardPID(); pid == 0 || !processRuns(pid) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.vsDown || r.vsFrozen {
		return false
	}
	for _, on := range r.running {
		if on {
			return false
		}
	}
	return true
}

// closed is a channel that is always closed: a trigger whose event came.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// replayUnderWay returns when the replay of br-int under way began (as its
// event reached the harness), if one is: begun less than underWay ago (a
// replay whose end the harness missed, its flowstated killed, is over).
func (r *run) replayUnderWay() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := len(r.spans) - 1; i >= 0 && r.spans[i].end.IsZero() && time.Since(r.spans[i].start) < underWay {
		return r.spans[i].start, true
	}
	return time.Time{}, false
}

// watchEvents follows flowstated's events for the whole run: replay starts
// fire r.replays (and are kept as spans for the poisoned check), and an
// entry quarantined as a crash suspect or as poisoned is noted. A Watch
// that ends (flowstated restarted) is started again from now.
func (r *run) watchEvents(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.n.c.Watch(ctx, client.Cursor{}, func(e client.Event) error {
			r.mu.Lock()
			r.lastEvent = time.Now()
			r.eventEpoch = r.epoch
			r.mu.Unlock()
			if e.Bridge != "" && e.Bridge != Managed {
				return nil
			}
			switch e.Type {
			case client.EventReplayStarted:
				r.mu.Lock()
				r.spans = append(r.spans, span{start: time.Now()})
				r.mu.Unlock()
				r.replays.fire()
			case client.EventReplayFinished:
				r.mu.Lock()
				if i := len(r.spans) - 1; i >= 0 && r.spans[i].end.IsZero() {
					r.spans[i].end = time.Now()
				}
				r.mu.Unlock()
			case client.EventEntryQuarantined:
				if crashReason(e.Attrs["reason"]) {
					r.mu.Lock()
					r.crashQuarantines = append(r.crashQuarantines, e.Message+" ("+e.Attrs["reason"]+")")
					r.mu.Unlock()
				}
			}
			return nil
		})
		if ctx.Err() == nil {
			r.log.Info("watch ended; watching again", "err", err)
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// noteVswitchdKill notes a SIGKILL of vswitchd by the harness, and
// whether the harness could see replays then (an event since flowstated's
// last start): see replayKills.
func (r *run) noteVswitchdKill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vsKills = append(r.vsKills, vsKill{at: time.Now(), blind: r.eventEpoch != r.epoch || r.lastEvent.IsZero()})
}

// vsKill is one SIGKILL of vswitchd by the harness.
type vsKill struct {
	at    time.Time
	blind bool
}

// replayKills counts the harness's SIGKILLs of vswitchd that flowstated
// may have counted as crashes at a replay: it counts a death that fails a
// replay (the pidfile is left), so a kill within a second of a replay's
// span, or while the harness could not see replays, may be one. r.mu must
// be held.
func (r *run) replayKillsLocked() int {
	n := 0
	for _, k := range r.vsKills {
		in := k.blind
		for _, sp := range r.spans {
			if sp.start.Before(k.at.Add(time.Second)) && sp.start.After(k.at.Add(-30*time.Second)) &&
				(sp.end.IsZero() || sp.end.After(k.at.Add(-time.Second))) {
				in = true
			}
		}
		if in {
			n++
		}
	}
	return n
}
