package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/guard"
)

// bridgeStatus returns flowstated's status of bridge br.
func (n *node) bridgeStatus(ctx context.Context, br string) client.BridgeStatus {
	n.t.Helper()
	st, err := n.c.Status(ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, b := range st.Bridges {
		if b.Name == br {
			return b
		}
	}
	n.t.Fatalf("no bridge %s in status", br)
	return client.BridgeStatus{}
}

// forwardsAfter polls until br forwards a SYN from p1 to p2 and returns the
// time since start.
func (n *node) forwardsAfter(ctx context.Context, br string, start time.Time) time.Duration {
	n.t.Helper()
	var held time.Duration
	n.poll(ctx, br+" forwards", func() bool {
		ok := n.forwards(ctx, br, sandbox.Packet{SrcPort: uint16(42000 + time.Now().UnixMilli()%1000)}, 50*time.Millisecond)
		held = time.Since(start)
		return ok
	})
	return held
}

// armRefused checks that Arm (what flowctl prestart and ovs-restart ask)
// refuses with FAILED_PRECONDITION saying want.
func (n *node) armRefused(ctx context.Context, want string) {
	n.t.Helper()
	if _, err := n.c.Arm(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), want) {
		n.t.Fatalf("arm: %v, want FAILED_PRECONDITION saying %q", err, want)
	}
}

// rearmed waits until the flag is armed with a guard holding the lease.
func (n *node) rearmed(ctx context.Context) {
	n.t.Helper()
	n.poll(ctx, "flag armed, guard running", func() bool {
		present, err := guard.Present(n.lease)
		return err == nil && present && n.flag(ctx)
	})
}

// guardSeen waits until flowstated sees its guard running.
func (n *node) guardSeen(ctx context.Context) {
	n.t.Helper()
	n.poll(ctx, "flowstated sees its guard", func() bool {
		st, err := n.c.Status(ctx)
		return err == nil && st.Guard.Running
	})
}

// TestBinaryReleaseWithoutConvergence is server's
// TestReleaseWithoutConvergence on the real binary with its spawned guard:
// br-int, the only managed bridge, missing from OVSDB or without OpenFlow
// 1.5, and vswitchd restarted held: br-ex forwards at once, or within
// --max-hold. At provisioning (br-int not created yet, vswitchd not
// started) vswitchd starts unheld.
func TestBinaryReleaseWithoutConvergence(t *testing.T) {
	args := []string{"--bridge", "br-int", "--guard", "spawn", "--guard-grace", "2s"}
	put := func(ctx context.Context, n *node) {
		n.t.Helper()
		es := make([]client.Entry, len(guardPipeline))
		for i, l := range guardPipeline {
			es[i] = client.FlowText(l)
		}
		if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, es...); err != nil {
			n.t.Fatal(err)
		}
		n.poll(ctx, "br-int converged", func() bool { return n.bridgeStatus(ctx, "br-int").Converged })
		n.rearmed(ctx)
	}
	t.Run("missing", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		n := newNode(ctx, t, []string{"br-int", "br-ex"}, append(args, "--max-hold", "1m")...)
		n.start(ctx)
		put(ctx, n)
		if out, err := n.sb.Vsctl(ctx, "del-br", "br-int"); err != nil {
			t.Fatal(err, out)
		}
		n.poll(ctx, "flag disarmed", func() bool { return !n.flag(ctx) })
		n.armRefused(ctx, "bridge br-int does not exist in OVSDB")
		// The flag set while vswitchd is down, as a flowstated of before
		// this fix left it re-armed.
		if err := n.sb.RestartVswitchd(ctx, true); err != nil {
			t.Fatal(err)
		}
		held := n.forwardsAfter(ctx, "br-ex", time.Now())
		t.Logf("br-ex forwarded %v after vswitchd started (max-hold 1m)", held.Round(time.Millisecond))
		if held > 5*time.Second {
			t.Fatalf("br-ex held %v with the only managed bridge missing", held)
		}
	})
	t.Run("no OpenFlow 1.5", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		const maxHold = 3 * time.Second
		n := newNode(ctx, t, []string{"br-int", "br-ex"}, append(args, "--max-hold", maxHold.String())...)
		n.start(ctx)
		put(ctx, n)
		if out, err := n.sb.Vsctl(ctx, "set", "bridge", "br-int", "protocols=OpenFlow13"); err != nil {
			t.Fatal(err, out)
		}
		n.poll(ctx, "br-int unconverged", func() bool { return !n.bridgeStatus(ctx, "br-int").Converged })
		// A crash, started plainly: the re-armed flag holds it.
		started := n.restartVswitchdPlainly(ctx)
		held := n.forwardsAfter(ctx, "br-ex", started)
		t.Logf("br-ex forwarded %v after vswitchd started (max-hold %v)", held.Round(time.Millisecond), maxHold)
		if held < maxHold-time.Second || held > maxHold+5*time.Second {
			t.Fatalf("br-ex held %v, want about --max-hold %v", held, maxHold)
		}
		if ex := n.bridgeStatus(ctx, "br-int").Excused; !strings.Contains(ex, "could not be restored within --max-hold 3s") {
			t.Fatalf("br-int excused %q", ex)
		}
	})
	t.Run("provisioning", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// A first boot: cold, a required module that waits for br-int,
		// and a flag left set in the node's database.
		n := newNode(ctx, t, []string{"br-ex"}, append(args, "--require-module", "pipeline")...)
		if err := n.sb.StopVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		if err := n.sb.SetFlowRestoreWait(ctx, true); err != nil {
			t.Fatal(err)
		}
		n.start(ctx)
		n.poll(ctx, "br-int excused and the flag cleared, the gate closed", func() bool {
			st, err := n.c.Status(ctx)
			return err == nil && !st.Gate.Open && !n.flag(ctx) &&
				strings.Contains(n.bridgeStatus(ctx, "br-int").Excused, "does not exist in OVSDB")
		})
		n.guardSeen(ctx)
		n.armRefused(ctx, "nothing for flowstated to restore (bridge br-int does not exist in OVSDB)")
		if n.flag(ctx) {
			t.Fatal("flag armed before vswitchd's first start, with no managed bridge")
		}
		if err := n.sb.StartVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		held := n.forwardsAfter(ctx, "br-ex", time.Now())
		t.Logf("br-ex forwarded %v after vswitchd started", held.Round(time.Millisecond))
		if n.flag(ctx) {
			t.Fatal("flag armed with no managed bridge")
		}
		// The CNI creates br-int: managed and armed for.
		if err := n.sb.AddBridge(ctx, "br-int"); err != nil {
			t.Fatal(err)
		}
		put(ctx, n)
	})
}

// TestBinaryStandAsideSurvivesRestarts is server's
// TestStandAsideSurvivesRestarts on the real binary: installed over a
// running controller, flowstated stands aside and arms nothing; after a
// vswitchd crash, and again after a flowstated crash beside an emptied
// bridge, it still stands aside, the bridge holds plain OVS's NORMAL flow
// and then the controller's reinstalled flows; --take-over adopts it.
func TestBinaryStandAsideSurvivesRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "spawn", "--guard-grace", "2s",
		"--audit-interval", "200ms")
	controller := func() []string {
		t.Helper()
		f := filepath.Join(n.dir, "controller.txt")
		if err := os.WriteFile(f, []byte(strings.Join(guardPipeline, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := n.sb.Ofctl(ctx, "add-flows", "br-int", f); err != nil {
			t.Fatal(err, out)
		}
		return n.dump(ctx, "br-int")
	}
	standsAside := func() {
		t.Helper()
		n.poll(ctx, "br-int connected and stood aside", func() bool {
			st := n.bridgeStatus(ctx, "br-int")
			if st.Converged {
				t.Fatal("br-int converged: flowstated claimed it")
			}
			return st.Connected && strings.Contains(st.Reason, "kept in the store")
		})
		n.guardSeen(ctx)
		n.armRefused(ctx, "flowstated stands aside from bridge br-int")
		if n.flag(ctx) {
			t.Fatal("flag armed while standing aside from the only bridge")
		}
	}
	crash := func() {
		t.Helper()
		if err := n.sb.KillVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		if n.cmd.ProcessState == nil {
			n.poll(ctx, "br-int disconnected", func() bool { return !n.bridgeStatus(ctx, "br-int").Connected })
		}
		if err := n.sb.StartVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
	}
	normal := []string{"priority=0 actions=NORMAL"}

	want := controller()
	n.start(ctx)
	standsAside()
	if got := n.dump(ctx, "br-int"); !slices.Equal(got, want) {
		t.Fatalf("standing aside, br-int holds %q, want %q", got, want)
	}
	crash()
	standsAside()
	if got := n.dump(ctx, "br-int"); !slices.Equal(got, normal) {
		t.Fatalf("after the crash br-int holds %q, want %q as plain OVS", got, normal)
	}
	if !n.forwards(ctx, "br-int", sandbox.Packet{}, time.Second) {
		t.Fatal("br-int does not forward with its NORMAL flow after the crash")
	}
	want = controller()
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		if got := n.dump(ctx, "br-int"); !slices.Equal(got, want) {
			t.Fatalf("the controller's flows changed while standing aside: %q", got)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// flowstated crashes, vswitchd too: flowstated starts beside an empty
	// bridge and stands aside from the store's record.
	n.signal(ctx, syscall.SIGKILL)
	crash()
	n.start(ctx)
	standsAside()
	if got := n.dump(ctx, "br-int"); !slices.Equal(got, normal) {
		t.Fatalf("after flowstated's restart br-int holds %q, want %q", got, normal)
	}

	// Adopted with --take-over once; a later start without it manages the
	// bridge (OVSDB names this store now, the record is gone).
	es := make([]client.Entry, len(guardPipeline))
	for i, l := range guardPipeline {
		es[i] = client.FlowText(l)
	}
	if res, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, es...); err != nil || res.Applied {
		t.Fatalf("sync while standing aside: applied=%v err=%v, want stored only", res.Applied, err)
	}
	n.signal(ctx, syscall.SIGTERM)
	base := n.args
	n.args = append(slices.Clone(base), "--take-over")
	n.start(ctx)
	n.armedWithGuard(ctx)
	n.signal(ctx, syscall.SIGTERM)
	n.args = base
	n.start(ctx)
	n.armedWithGuard(ctx)
	if got := n.dump(ctx, "br-int"); len(got) != len(guardPipeline) {
		t.Fatalf("adopted br-int holds %q", got)
	}
}
