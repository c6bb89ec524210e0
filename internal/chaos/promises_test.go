package chaos

import (
	"errors"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
)

// TestNoteAcks: an acknowledged change is kept per flow with its first
// acknowledgement (a reinstall of the same state does not restart its
// clock), a reinstall makes what it left out absent, a refusal changes
// nothing, and an unknown outcome leaves the flow unchecked.
func TestNoteAcks(t *testing.T) {
	w := newWriter(Proxied, 30, 3, 1, nil, func() int { return 1 })
	w.acks = map[string]*ack{}
	a, b := w.ip(0), w.ip(1)
	put := func(set map[string]string, replace bool, err error) {
		w.record(set, replace, err)
		w.noteAcks(set, replace, time.Now(), err)
	}
	put(map[string]string{a: "drop", b: "output:2"}, false, nil)
	first := w.acks[a].at
	put(map[string]string{a: "drop", b: "output:2"}, true, nil) // a reinstall, unchanged
	if !w.acks[a].at.Equal(first) {
		t.Fatal("a reinstall of the same state restarted the flow's clock")
	}
	put(map[string]string{a: "output:2"}, true, nil) // b left out
	if got := w.acks[b]; got.present || got.unsure {
		t.Fatalf("a flow the reinstall left out: %+v, want acknowledged absent", got)
	}
	if got := w.acks[a]; !got.present || got.actions != "output:2" || got.at.Equal(first) {
		t.Fatalf("a changed flow: %+v", got)
	}
	put(map[string]string{a: "drop"}, false, errdefs.ErrInvalidArgument) // refused
	if got := w.acks[a]; got.actions != "output:2" || got.unsure {
		t.Fatalf("a refusal changed the flow's acknowledgement: %+v", got)
	}
	put(map[string]string{a: "drop"}, false, errors.New("connection lost")) // unknown
	if pending := w.pendingAcks(); len(pending) != 1 || pending[b].present {
		t.Fatalf("pending after an unknown outcome of %s: %+v, want only %s (absent)", a, pending, b)
	}
}

// TestReplayKills: a harness kill of vswitchd counts toward excusing crash
// suspects when it fell within a second of a replay's span, or while the
// harness could not see replays; not otherwise.
func TestReplayKills(t *testing.T) {
	t0 := time.Now()
	r := &run{
		spans: []span{{start: t0, end: t0.Add(50 * time.Millisecond)}, {start: t0.Add(20 * time.Second)}},
		vsKills: []vsKill{
			{at: t0.Add(30 * time.Millisecond)},         // inside the first
			{at: t0.Add(900 * time.Millisecond)},        // within a second of its end
			{at: t0.Add(5 * time.Second)},               // far from both
			{at: t0.Add(10 * time.Second), blind: true}, // replays unseen
			{at: t0.Add(19500 * time.Millisecond)},      // the event came after the kill
			{at: t0.Add(60 * time.Second)},              // long after a span whose end was not seen
		},
	}
	if got := r.replayKillsLocked(); got != 4 {
		t.Fatalf("replayKills = %d, want 4", got)
	}
	for _, reason := range []string{"suspected of crashing ovs-vswitchd (vswitchd died twice)", "crashed ovs-vswitchd at a replay (found by bisection)"} {
		if !crashReason(reason) {
			t.Errorf("crashReason(%q) = false", reason)
		}
	}
	if crashReason("OFPBAC_BAD_OUT_GROUP") || crashReason("checksum mismatch in bucket flows") {
		t.Error("crashReason took a switch refusal or a damaged record for a crash")
	}
}

// TestPoisonExcused: two deaths at replays excuse a suspect held out, the
// harness's kills among them; an entry named poisoned is excused by the
// harness's kills only where flowstated cannot hear that they came from
// outside (not root), and by vswitchd's own deaths always (issue 31, 6).
func TestPoisonExcused(t *testing.T) {
	for _, c := range []struct {
		kills, self       int
		named, hearsKills bool
		want              bool
	}{
		{kills: 2, want: true},
		{kills: 1, self: 1, hearsKills: true, want: true},
		{kills: 1, want: false},
		{kills: 2, named: true, hearsKills: true, want: false},
		{kills: 2, self: 1, named: true, hearsKills: true, want: false},
		{self: 2, named: true, hearsKills: true, want: true},
		{kills: 2, named: true, want: true},
	} {
		if got := poisonExcused(c.kills, c.self, c.named, c.hearsKills); got != c.want {
			t.Errorf("poisonExcused(kills %d, own deaths %d, named %v, hears kills %v) = %v, want %v", c.kills, c.self, c.named, c.hearsKills, got, c.want)
		}
	}
	if !foundPoisoned("crashed ovs-vswitchd at a replay (found by bisection)") || foundPoisoned("suspected of crashing ovs-vswitchd (vswitchd died twice)") {
		t.Error("foundPoisoned does not tell a verdict from a suspect")
	}
}
