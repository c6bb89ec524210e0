package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// newEnvOf is newEnv with a sandbox holding bridges (each with ports
// <bridge>-p1 and -p2); flowstated manages br-int, which may not be one.
func newEnvOf(ctx context.Context, t *testing.T, bridges []string, opts ...func(*server.Config)) *env {
	t.Helper()
	te := testenv.New(ctx, t, testenv.Bridges(bridges...), testenv.Configure(opts...))
	return &env{Env: te, t: t, sb: te.Sandbox, c: te.Client, dir: te.Sandbox.Dir(), sock: te.Config.Listen}
}

// forwardsAfter polls until br forwards a SYN from p1 to p2 (its NORMAL
// flow floods it) and returns the time since start.
func (e *env) forwardsAfter(ctx context.Context, br string, start time.Time) time.Duration {
	e.t.Helper()
	tx0 := e.txOf(ctx, br, "p2")
	var held time.Duration
	poll(ctx, e.t, br+" forwards", func() (bool, error) {
		e.injectOn(ctx, br, sandbox.Packet{SrcPort: uint16(40000 + time.Now().UnixMilli()%1000)})
		held = time.Since(start)
		return e.txOf(ctx, br, "p2") > tx0, nil
	})
	return held
}

// sample returns the value of the sample named name on /metrics.
func (e *env) sample(ctx context.Context, name string) string {
	e.t.Helper()
	for _, l := range strings.Split(e.Metrics(ctx), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	e.t.Fatalf("no %s on /metrics", name)
	return ""
}

// armRefused checks that Arm refuses with FAILED_PRECONDITION saying want.
func (e *env) armRefused(ctx context.Context, want string) {
	e.t.Helper()
	if _, err := e.c.Arm(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), want) {
		e.t.Fatalf("arm: %v, want FAILED_PRECONDITION saying %q", err, want)
	}
}

// TestReleaseWithoutConvergence: the only managed bridge, br-int, is excused
// and no managed bridge converges: the node is released all the same, and
// br-ex (unmanaged) forwards at once when br-int is missing from OVSDB,
// within --max-hold of the vswitchd start when it cannot be restored (no
// OpenFlow 1.5). At provisioning (a cold start whose required module waits
// for br-int, which is not created yet), flowstated arms nothing, clears a
// flag it finds set, and vswitchd starts unheld; once br-int exists and the
// module is ready it is managed and the flag armed for it.
func TestReleaseWithoutConvergence(t *testing.T) {
	configure := func(maxHold time.Duration) func(*server.Config) {
		return func(c *server.Config) {
			c.MaxHold = maxHold
			c.RearmFlowRestoreWait = true
			c.MetricsListen = "127.0.0.1:0"
		}
	}
	armed := func(ctx context.Context, e *env) {
		e.t.Helper()
		poll(ctx, e.t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	}
	t.Run("missing", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		e := newEnvOf(ctx, t, []string{"br-int", "br-ex"}, configure(time.Minute))
		e.Start(ctx)
		e.WaitConverged(ctx)
		e.putPipeline(ctx)
		armed(ctx, e)
		if out, err := e.sb.Vsctl(ctx, "del-br", "br-int"); err != nil {
			t.Fatal(err, out)
		}
		// Nothing is left to restore: the flag goes, and Arm says why.
		poll(ctx, t, "br-int excused and the flag disarmed", func() (bool, error) {
			on, err := e.sb.FlowRestoreWait(ctx)
			return !on && strings.Contains(e.bridgeStatus(ctx, "br-int").Excused, "does not exist in OVSDB"), err
		})
		e.armRefused(ctx, "nothing for flowstated to restore (bridge br-int does not exist in OVSDB)")

		// vswitchd restarted held anyway (a flag set while it was down).
		if err := e.sb.RestartVswitchd(ctx, true); err != nil {
			t.Fatal(err)
		}
		held := e.forwardsAfter(ctx, "br-ex", time.Now())
		t.Logf("br-ex forwarded %v after vswitchd started (max-hold 1m; releases counted: %s)",
			held.Round(time.Millisecond), e.sample(ctx, "flowstate_flow_restore_wait_cleared_total"))
		if held > 5*time.Second {
			t.Fatalf("br-ex held %v with the only managed bridge missing", held)
		}
		poll(ctx, t, "flag cleared and read by vswitchd", func() (bool, error) {
			on, err := e.sb.FlowRestoreWait(ctx)
			next, cur, cerr := e.sb.Cfg(ctx)
			return !on && cur >= next, errors.Join(err, cerr)
		})
	})
	t.Run("no OpenFlow 1.5", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		const maxHold = 3 * time.Second
		e := newEnvOf(ctx, t, []string{"br-int", "br-ex"}, configure(maxHold))
		e.Start(ctx)
		e.WaitConverged(ctx)
		e.putPipeline(ctx)
		armed(ctx, e)
		if out, err := e.sb.Vsctl(ctx, "set", "bridge", "br-int", "protocols=OpenFlow13"); err != nil {
			t.Fatal(err, out)
		}
		poll(ctx, t, "br-int unconverged", func() (bool, error) { return !e.bridgeStatus(ctx, "br-int").Converged, nil })
		if err := e.sb.RestartVswitchd(ctx, true); err != nil {
			t.Fatal(err)
		}
		held := e.forwardsAfter(ctx, "br-ex", time.Now())
		t.Logf("br-ex forwarded %v after vswitchd started (max-hold %v)", held.Round(time.Millisecond), maxHold)
		// The hold counts from this vswitchd's start (seen within the
		// flag check's second), not from when br-int stopped converging.
		if held < maxHold-time.Second || held > maxHold+5*time.Second {
			t.Fatalf("br-ex held %v, want about --max-hold %v", held, maxHold)
		}
		st := e.bridgeStatus(ctx, "br-int")
		if st.Converged || !strings.Contains(st.Excused, "could not be restored within --max-hold 3s") {
			t.Fatalf("br-int: converged %v, excused %q", st.Converged, st.Excused)
		}
		// Counted once the store recorded the release, which may come
		// after vswitchd forwards.
		poll(ctx, t, "one release counted", func() (bool, error) {
			return e.sample(ctx, "flowstate_flow_restore_wait_cleared_total") == "1", nil
		})
		// br-int exists: the next vswitchd start is gated again.
		armed(ctx, e)
	})
	t.Run("provisioning", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// A first boot: cold, with a required module that cannot be ready
		// before br-int exists; the flag left set by whoever built the
		// node's database.
		e := newEnvOf(ctx, t, []string{"br-ex"}, configure(time.Minute), func(c *server.Config) {
			c.RequiredModules = []string{"pipeline"}
		})
		if err := e.sb.StopVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.sb.SetFlowRestoreWait(ctx, true); err != nil {
			t.Fatal(err)
		}
		e.Start(ctx)
		poll(ctx, t, "br-int excused and the flag cleared, the gate closed", func() (bool, error) {
			on, err := e.sb.FlowRestoreWait(ctx)
			return !on && !e.status(ctx).Gate.Open && strings.Contains(e.bridgeStatus(ctx, "br-int").Excused, "does not exist in OVSDB"), err
		})
		// What the vswitchd drop-in (flowctl prestart) asks before the start.
		e.armRefused(ctx, "nothing for flowstated to restore (bridge br-int does not exist in OVSDB)")
		if err := e.sb.StartVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		held := e.forwardsAfter(ctx, "br-ex", time.Now())
		t.Logf("br-ex forwarded %v after vswitchd started", held.Round(time.Millisecond))
		if n := e.sample(ctx, "flowstate_flow_restore_wait_rearmed_total"); n != "0" {
			t.Fatalf("rearmed_total %s before br-int exists, want 0", n)
		}

		// The CNI creates br-int: flowstated manages it, and arms for it.
		if err := e.sb.AddBridge(ctx, "br-int"); err != nil {
			t.Fatal(err)
		}
		for i, p := range []string{"p1", "p2"} {
			if err := e.sb.AddPort(ctx, "br-int", "br-int-"+p, i+1); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, texts(pipeline)...); err != nil {
			t.Fatal(err)
		}
		poll(ctx, t, "gate open, br-int converged", func() (bool, error) {
			return e.status(ctx).Gate.Open && e.bridgeStatus(ctx, "br-int").Converged, nil
		})
		armed(ctx, e)
		if got := e.dump(ctx, "br-int"); len(got) != len(pipeline) {
			t.Fatalf("br-int holds %q", got)
		}
		if ex := e.bridgeStatus(ctx, "br-int").Excused; ex != "" {
			t.Fatalf("br-int converged but excused: %q", ex)
		}
	})
}

var adoptCommand = regexp.MustCompile(`external_ids:flowstate-store=([0-9a-f-]{36})`)

// TestStandAsideSurvivesRestarts: flowstated installed over a running
// controller (br-int holds its pipeline, the new store declares nothing)
// stands aside, and stays aside across a vswitchd crash and a flowstated
// restart, although br-int then comes back empty: the bridge comes back as
// plain OVS brings it back (NORMAL), the controller's reinstalled flows
// survive the audits, a Reconcile is refused, and nothing is armed, until
// the operator adopts the bridge.
func TestStandAsideSurvivesRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnvOf(ctx, t, []string{"br-int"}, func(c *server.Config) {
		c.RearmFlowRestoreWait = true
		c.AuditInterval = 200 * time.Millisecond
		c.MetricsListen = "127.0.0.1:0"
	})
	controller := func() []string {
		t.Helper()
		f := filepath.Join(e.dir, "controller.txt")
		if err := os.WriteFile(f, []byte(strings.Join(pipeline, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := e.sb.Ofctl(ctx, "add-flows", "br-int", f); err != nil {
			t.Fatal(err, out)
		}
		return e.dump(ctx, "br-int")
	}
	normal := []string{"priority=0 actions=NORMAL"}
	// standsAside waits until flowstated's claim, on its current connection
	// to br-int, stood aside, then checks that nothing is armed.
	standsAside := func() string {
		t.Helper()
		var reason string
		poll(ctx, t, "br-int connected and stood aside", func() (bool, error) {
			st := e.bridgeStatus(ctx, "br-int")
			reason = st.Reason
			if st.Converged {
				return false, errors.New("br-int converged: flowstated claimed it")
			}
			return st.Connected && strings.Contains(reason, "stands aside"), nil
		})
		e.armRefused(ctx, "flowstated stands aside from bridge br-int")
		if on, err := e.sb.FlowRestoreWait(ctx); err != nil || on {
			t.Fatalf("flag armed while standing aside from the only bridge: %v %v", on, err)
		}
		if n := e.sample(ctx, "flowstate_flow_restore_wait_rearmed_total"); n != "0" {
			t.Fatalf("rearmed_total %s while standing aside, want 0", n)
		}
		return reason
	}
	// crash kills vswitchd and starts it plainly, once flowstated saw the
	// connection go.
	crash := func() {
		t.Helper()
		if err := e.sb.KillVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		if e.Daemon != nil {
			poll(ctx, t, "br-int disconnected", func() (bool, error) { return !e.bridgeStatus(ctx, "br-int").Connected, nil })
		}
		if err := e.sb.StartVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
	}

	want := controller()
	e.Start(ctx)
	reason := standsAside()
	if !strings.Contains(reason, "holds 6 flows") || !strings.Contains(reason, "kept in the store") {
		t.Fatalf("reason: %s", reason)
	}
	if got := e.dump(ctx, "br-int"); !slices.Equal(got, want) {
		t.Fatalf("standing aside, br-int holds %q, want the controller's %q", got, want)
	}

	// vswitchd crashes: br-int comes back unheld with its NORMAL flow, and
	// flowstated does not claim the empty bridge.
	crash()
	standsAside()
	if got := e.dump(ctx, "br-int"); !slices.Equal(got, normal) {
		t.Fatalf("after the crash br-int holds %q, want %q as plain OVS", got, normal)
	}
	// The controller reinstalls its pipeline; audits and a Reconcile leave
	// it alone, through several audit intervals and claim rounds.
	want = controller()
	if _, err := e.c.Reconcile(ctx, "br-int"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Reconcile while standing aside: %v, want FAILED_PRECONDITION", err)
	}
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		if got := e.dump(ctx, "br-int"); !slices.Equal(got, want) {
			t.Fatalf("the controller's flows changed while standing aside: %q", got)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// flowstated restarts while vswitchd crashes again: it starts beside
	// an empty bridge, and still stands aside from its record.
	e.Stop()
	crash()
	e.Start(ctx)
	reason = standsAside()
	if got := e.dump(ctx, "br-int"); !slices.Equal(got, normal) {
		t.Fatalf("after flowstated's restart br-int holds %q, want %q", got, normal)
	}

	// The operator adopts the bridge: the controller's module synced
	// (stored only), this store's id written as the reason says.
	if applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil || applied {
		t.Fatalf("put while standing aside: applied=%v err=%v, want stored only", applied, err)
	}
	m := adoptCommand.FindStringSubmatch(reason)
	if m == nil {
		t.Fatalf("reason names no adoption command: %s", reason)
	}
	if out, err := e.sb.Vsctl(ctx, "set", "Bridge", "br-int", "external_ids:flowstate-store="+m[1]); err != nil {
		t.Fatal(err, out)
	}
	e.WaitConverged(ctx)
	poll(ctx, t, "flag armed for the adopted bridge", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	if got := e.dump(ctx, "br-int"); len(got) != len(pipeline) {
		t.Fatalf("adopted br-int holds %q", got)
	}
	// Adopted for good: a restarted flowstated manages it at once.
	e.Stop()
	e.Start(ctx)
	st := e.WaitConverged(ctx)
	if b := st.Bridges[0]; !b.Converged || b.Excused != "" {
		t.Fatalf("after adoption and a restart: %+v", b)
	}
	if v := e.sample(ctx, `flowstate_bridge_standing_aside{bridge="br-int"}`); v != "0" {
		t.Fatalf("standing_aside %s after adoption", v)
	}
}
