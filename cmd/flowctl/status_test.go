package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// pipelineFlows is a module's two flows.
const pipelineFlows = "table=0,priority=100,ip,actions=drop\ntable=0,priority=50,actions=normal\n"

// statusText runs flowctl status against e and returns its text.
func statusText(ctx context.Context, t *testing.T, e *testenv.Env) string {
	t.Helper()
	out, stderr, code := flowctl(ctx, "", "--server", e.Config.Listen, "status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	return out
}

// TestStatusTruth is issue 24's "status tells the truth": the re-armed
// flag of steady state, and again right after flowctl release, reads as
// armed for the next vswitchd start; the last release is shown and kept
// across a flowstated restart, so wait --released --since works after one;
// vswitchd's view is shown only while it runs; status shows both builds
// (TestFlowctl: it leaves out its own session).
func TestStatusTruth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) {
		c.RearmFlowRestoreWait = true
		c.Guard = server.GuardConfig{Mode: server.GuardOff}
	}))
	e.Start(ctx)
	e.WaitConverged(ctx)
	if _, stderr, code := flowctl(ctx, pipelineFlows, "--server", e.Config.Listen, "add-flows", "--module", "pipeline", "-"); code != 0 {
		t.Fatalf("add-flows: %s", stderr)
	}
	armed := func(what string) string {
		t.Helper()
		var out string
		testenv.Poll(ctx, t, what, func() (bool, error) {
			out = statusText(ctx, t, e)
			if strings.Contains(out, "HOLDING") {
				return false, fmt.Errorf("%s: a released vswitchd described as held:\n%s", what, out)
			}
			// vswitchd reads the re-arm a moment after it is made.
			return strings.Contains(out, "flow-restore-wait: armed for the next vswitchd start") &&
				strings.Contains(out, "ovs-vswitchd running, read by vswitchd: true"), nil
		})
		return out
	}
	out := armed("steady state: the re-armed flag")
	if !strings.Contains(out, "server flowstated ") || !strings.Contains(out, "; client flowctl ") {
		t.Fatalf("no builds in status:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^ovs-vswitchd version: \d+\.\d+\.\d+`).MatchString(out) {
		t.Fatalf("no vswitchd version in status:\n%s", out)
	}
	if !strings.Contains(out, "\novn-controller: not asked (--ovn-rundir \"\")\n") {
		t.Fatalf("no ovn-controller line in status:\n%s", out)
	}

	// A held vswitchd: restarted with the flag armed, restored, released.
	// The release counts from before the kill: it can come before flowctl
	// has started (--since now missed one 10 ms after vswitchd's start).
	before := time.Now()
	if err := e.Sandbox.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Sandbox.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := flowctl(ctx, "", "--server", e.Config.Listen, "--timeout", "30s", "wait", "--converged", "--released", "--since", before.UTC().Format(time.RFC3339Nano)); code != 0 {
		t.Fatalf("wait after the vswitchd restart: %s", stderr)
	}
	out = armed("re-armed after the restore")
	if !regexp.MustCompile(`last release of ovs-vswitchd: \S+ \(\d+s ago\)`).MatchString(out) {
		t.Fatalf("no last release:\n%s", out)
	}

	// Right after a manual release flowstated re-arms for the next start.
	if _, stderr, code := flowctl(ctx, "", "--server", e.Config.Listen, "release"); code != 0 {
		t.Fatalf("release: %s", stderr)
	}
	armed("right after flowctl release")

	// The last release survives a flowstated restart.
	e.Stop()
	e.Start(ctx)
	e.WaitConverged(ctx)
	since := strconv.Itoa(int(time.Since(before).Seconds())+5) + "s"
	if _, stderr, code := flowctl(ctx, "", "--server", e.Config.Listen, "--timeout", "10s", "wait", "--released", "--since", since); code != 0 {
		t.Fatalf("wait --released --since %s after a flowstated restart: %s", since, stderr)
	}
	if out = statusText(ctx, t, e); strings.Contains(out, "last release of ovs-vswitchd: never") {
		t.Fatalf("the last release was forgotten by a restart:\n%s", out)
	}

	// vswitchd down: its view is not shown.
	if err := e.Sandbox.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(ctx, t, "status says vswitchd is not running", func() (bool, error) {
		out = statusText(ctx, t, e)
		return strings.Contains(out, "ovs-vswitchd NOT RUNNING"), nil
	})
	if strings.Contains(out, "read by vswitchd") {
		t.Fatalf("vswitchd's view shown while it is down:\n%s", out)
	}
	if err := e.Sandbox.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
}

// TestStatusGate: a closed gate counts down to its readiness timeout ("in
// 59s", at a time to come), and wait prints one line for it, not one a
// second. A vswitchd started under it is held, and status says so.
func TestStatusGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) {
		c.RequiredModules = []string{"pipeline"}
		c.ReadinessTimeout = time.Minute
		c.RearmFlowRestoreWait = true
	}))
	e.Start(ctx)
	out := statusText(ctx, t, e)
	if !regexp.MustCompile(`gate CLOSED: waiting for modules pipeline; readiness timeout \S+ \(in (\d+s|1m0s)\)\n`).MatchString(out) {
		t.Fatalf("gate line:\n%s", out)
	}
	// Only the countdown may change while wait runs: the bridge is
	// connected first, so its reason is the gate's from the start.
	testenv.Poll(ctx, t, "br-int connected under the closed gate", func() (bool, error) {
		return strings.Contains(statusText(ctx, t, e), "waiting for the cold-start gate"), nil
	})
	_, stderr, code := flowctl(ctx, "", "--server", e.Config.Listen, "--timeout", "3s", "wait", "--converged")
	if code != 1 {
		t.Fatalf("wait under a closed gate: exit %d\n%s", code, stderr)
	}
	if n := strings.Count(stderr, "waiting:"); n != 1 {
		t.Fatalf("wait printed %d lines in 3 s, want 1 (the countdown is no change):\n%s", n, stderr)
	}

	if err := e.Sandbox.SetFlowRestoreWait(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := e.Sandbox.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Sandbox.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(ctx, t, "status says the gate holds vswitchd", func() (bool, error) {
		out = statusText(ctx, t, e)
		return strings.Contains(out, "flow-restore-wait: set, HOLDING ovs-vswitchd"), nil
	})
	if _, stderr, code := flowctl(ctx, "", "--server", e.Config.Listen, "--timeout", "1s", "wait", "--released"); code != 1 ||
		!strings.Contains(stderr, "flow-restore-wait is set") {
		t.Fatalf("wait --released with vswitchd held: exit %d\n%s", code, stderr)
	}
}

// TestStatusStandAside: the reason flowstated stands aside from a bridge
// (flows its store never declared) is printed once, not as the bridge's
// reason and again as the excuse for releasing without it.
func TestStatusStandAside(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	if out, err := e.Sandbox.Ofctl(ctx, "add-flow", "br-int", "table=0,priority=90,arp,actions=NORMAL"); err != nil {
		t.Fatal(err, out)
	}
	e.Start(ctx)
	var reason, excused string
	testenv.Poll(ctx, t, "stood aside and excused", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		if err != nil || len(st.Bridges) == 0 {
			return false, nil
		}
		reason, excused = st.Bridges[0].Reason, st.Bridges[0].Excused
		return reason != "" && excused != "", nil
	})
	out := statusText(ctx, t, e)
	t.Logf("status:\n%s", out)
	if n := strings.Count(out, reason); n != 1 || !strings.Contains(out, "NOT RESTORED, node released without it: "+excused) {
		t.Fatalf("the reason (%d chars) printed %d times, want once:\n%s", len(reason), n, out)
	}
}
