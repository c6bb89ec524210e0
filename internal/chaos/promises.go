package chaos

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"
)

// barrierBound is how long a change the proxied controller's barrier
// acknowledged may take to reach the switch: a resync holds changes to
// entries the controller held before its clear at most 4 s after the clear
// (server/restore/resync.go), plus slack for the check's own polling and a
// loaded machine.
const barrierBound = 5*time.Second + 2*time.Second

// ack is the newest acknowledged change of one flow of the proxied
// controller: present with actions, or absent. sent is when the write
// began, at when its barrier was answered. unsure: a later write's outcome
// is unknown, so the switch may rightly hold either; done: checked.
type ack struct {
	present  bool
	actions  string
	sent, at time.Time
	epoch    int
	unsure   bool
	done     bool
}

// noteAcks records the outcome of a proxied write of set (replace: the
// controller's reinstall, after which what it left out is absent) begun at
// sent, for the barrier-delay check. It runs after record, whose model
// says what each flow is now. A flow acknowledged again in the state it
// was already acknowledged in keeps its first acknowledgement: the change
// is that old (a resync that reinstalls it must not restart its clock).
func (w *writer) noteAcks(set map[string]string, replace bool, sent time.Time, err error) {
	if w.acks == nil || (err != nil && (definite(err) || refusedByProxy(err))) {
		return // a refusal changed nothing
	}
	epoch := w.epoch()
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	touched := sortedKeys(set)
	if replace {
		touched = sortedKeys(w.model)
	}
	for _, ip := range touched {
		st := w.model[ip]
		if err != nil || st.unknown || st.relayed {
			w.acks[ip] = &ack{unsure: true}
			continue
		}
		if a := w.acks[ip]; a != nil && !a.unsure && a.present == st.present && a.actions == st.actions {
			continue // the same state again (a reinstall): no new change, its clock runs on
		}
		w.acks[ip] = &ack{present: st.present, actions: st.actions, sent: sent, at: now, epoch: epoch}
	}
}

// pendingAcks returns the acknowledged changes not checked yet, by flow.
func (w *writer) pendingAcks() map[string]ack {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]ack{}
	for ip, a := range w.acks {
		if !a.done && !a.unsure {
			out[ip] = *a
		}
	}
	return out
}

// ackDone marks ip's change acknowledged at at as checked, unless a newer
// one replaced it meanwhile.
func (w *writer) ackDone(ip string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a := w.acks[ip]; a != nil && a.at.Equal(at) {
		a.done = true
	}
}

// barrierLoop checks the barrier-delay invariant twice a second: every
// change the proxied controller's barrier acknowledged is on the switch
// within barrierBound, unless a fault touched its window.
func (r *run) barrierLoop(ctx context.Context, w *writer) {
	for sleepCtx(ctx, 500*time.Millisecond) {
		r.barrierOnce(ctx, w)
	}
}

func (r *run) barrierOnce(ctx context.Context, w *writer) {
	r.mu.Lock()
	skip := r.vsDown || r.vsFrozen
	r.mu.Unlock()
	pid := r.n.sb.VswitchdPID()
	if skip || pid == 0 {
		return
	}
	pending := w.pendingAcks()
	if len(pending) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := r.n.sb.Ofctl(ctx, "--no-stats", "--no-names", "dump-flows", Managed, "table=30")
	if err != nil || r.n.sb.VswitchdPID() != pid {
		return // unobservable now (a protocols flip, a restart): a later look judges
	}
	have := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if ip := fieldOf(l, "nw_dst="); ip != "" {
			have[ip] = actionsOf(l)
		}
	}
	now := time.Now()
	for _, ip := range sortedKeys(pending) {
		a := pending[ip]
		got, on := have[ip]
		if on == a.present && (!on || got == a.actions) {
			w.ackDone(ip, a.at)
			r.rep.Checks.add(InvBarrier, nil)
			r.mu.Lock()
			r.barrierMax = max(r.barrierMax, now.Sub(a.at))
			r.mu.Unlock()
			continue
		}
		if now.Sub(a.at) <= barrierBound {
			continue
		}
		w.ackDone(ip, a.at)
		if r.barrierExcused(a) {
			continue
		}
		r.rep.Checks.add(InvBarrier, errors.New("violated"))
		want := "absent"
		if a.present {
			want = "actions=" + a.actions
		}
		state := "absent"
		if on {
			state = "actions=" + got
		}
		r.violate(InvBarrier, "module %s: flow nw_dst=%s acknowledged by a barrier reply %v ago as %s is still %s on br-int, with no fault since its write began",
			Proxied, ip, now.Sub(a.at).Round(time.Millisecond), want, state)
	}
}

// barrierExcused reports whether a fault touched a's window, from a second
// before its write began until now: a fault step began or ended in it, a
// lasting one is on, vswitchd is down or frozen or started since, the
// forwarding was disrupted, or flowstated restarted.
func (r *run) barrierExcused(a ack) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	from := a.sent.Add(-time.Second)
	lasting := false
	for _, on := range r.running {
		lasting = lasting || on
	}
	return lasting || r.vsDown || r.vsFrozen || a.epoch != r.epoch ||
		r.faultAt.After(from) || r.disrupted.After(from) || r.vsStart.After(from)
}

// touchFault notes that a fault step begins or ends now.
func (r *run) touchFault() {
	r.mu.Lock()
	r.faultAt = time.Now()
	r.mu.Unlock()
}

// crashReason reports a quarantine reason of the crash-loop protection
// (server/restore/poison.go): a suspect held out, or an entry found
// poisoned.
func crashReason(reason string) bool {
	return strings.Contains(reason, "crashing ovs-vswitchd") || strings.Contains(reason, "crashed ovs-vswitchd")
}

// foundPoisoned reports a quarantine reason that names an entry as having
// crashed vswitchd (the bisection's verdict), not a suspect held out.
func foundPoisoned(reason string) bool { return strings.Contains(reason, "crashed ovs-vswitchd") }

// poisonExcused reports whether crash quarantines are excused by how
// vswitchd died at replays. Two deaths flowstated may count (its own, or
// the harness's SIGKILLs near a replay) excuse suspects held out. An entry
// named poisoned needs a probe that sent it to have died (issue 31, fault
// 6): where flowstated hears exit statuses (root: --proc-connector) a kill
// from outside is no such death, so only vswitchd's own deaths excuse it.
func poisonExcused(kills, selfDeaths int, named, hearsKills bool) bool {
	if named && hearsKills {
		return selfDeaths >= 2
	}
	return kills+selfDeaths >= 2
}

// checkPoisoned checks the poisoned invariant at rest: no writer of the
// harness declares an entry that crashes vswitchd (the crashing learn is
// refused at declaration), so nothing may be quarantined as poisoned or
// held out as a suspect, at rest or during the run, unless poisonExcused.
func (r *run) checkPoisoned(parent context.Context) {
	// At rest is after a bisection's verdict: suspects still held out say
	// nothing yet.
	r.waitBisection(parent, bisectionWait)
	ctx, cancel := context.WithTimeout(parent, 10*time.Second)
	defer cancel()
	st, err := r.n.c.Status(ctx)
	if err != nil {
		r.violate(InvPoisoned, "status: %v", err)
		return
	}
	var held []string
	for _, q := range st.Quarantined {
		if crashReason(q.Error) {
			held = append(held, q.Entry.Module+": "+q.Entry.Text+" ("+q.Error+")")
		}
	}
	r.mu.Lock()
	seen := append([]string(nil), r.crashQuarantines...)
	kills := r.replayKillsLocked()
	r.mu.Unlock()
	r.rep.Checks.mu.Lock()
	selfDeaths := r.rep.Checks.ok[InvCrashloop] + r.rep.Checks.failed[InvCrashloop]
	r.rep.Checks.mu.Unlock()
	if len(held) == 0 && len(seen) == 0 {
		r.rep.Checks.add(InvPoisoned, nil)
		return
	}
	named := false
	for _, q := range append(held, seen...) {
		named = named || foundPoisoned(q)
	}
	if poisonExcused(kills, selfDeaths, named, os.Geteuid() == 0) {
		r.log.Warn("crash suspects excused: vswitchd died at a replay twice or more", "harness_kills", kills, "own_deaths", selfDeaths,
			"held", held, "seen", seen)
		r.rep.Checks.add(InvPoisoned+" (excused)", nil)
		return
	}
	r.rep.Checks.add(InvPoisoned, errors.New("violated"))
	r.violate(InvPoisoned, "entries held out as crashing vswitchd though no writer declares such an entry and vswitchd died at a replay %d times (harness kills near a replay %d, own deaths %d): at rest %q; during the run %q",
		kills+selfDeaths, kills, selfDeaths, held, seen)
}
