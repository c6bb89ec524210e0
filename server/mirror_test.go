package server_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/restore"
)

// The operator's br-ex, which flowstated does not manage: TCP to 10.0.0.99
// is dropped, IP to 10.0.0.50 goes through group 1 to p3, the rest is
// switched by NORMAL (which floods to p2 and p3).
var (
	exGroup = "group_id=1,type=all,bucket=output:3"
	exFlows = []string{
		"priority=200,tcp,nw_dst=10.0.0.99,actions=drop",
		"priority=100,ip,nw_dst=10.0.0.50,actions=group:1",
	}
	forbidden = sandbox.Packet{DstIP: "10.0.0.99"}
	viaGroup  = sandbox.Packet{DstIP: "10.0.0.50"}
)

// newExEnv is newEnv plus br-ex (ports p1, p2, p3) carrying the operator's
// flows and group, installed with ovs-ofctl.
func newExEnv(ctx context.Context, t *testing.T, opts ...func(*server.Config)) *env {
	t.Helper()
	e := newEnv(ctx, t, append([]func(*server.Config){func(c *server.Config) {
		c.RearmFlowRestoreWait = true
		c.MirrorInterval = 50 * time.Millisecond
	}}, opts...)...)
	if err := e.sb.AddBridge(ctx, "br-ex"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"p1", "p2", "p3"} {
		if err := e.sb.AddPort(ctx, "br-ex", "br-ex-"+p, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := e.sb.Ofctl(ctx, "add-group", "br-ex", exGroup); err != nil {
		t.Fatal(err, out)
	}
	for _, f := range exFlows {
		if out, err := e.sb.Ofctl(ctx, "add-flow", "br-ex", f); err != nil {
			t.Fatal(err, out)
		}
	}
	return e
}

// exState is br-ex's flows and groups as ovs-ofctl prints them, without
// counters.
func (e *env) exState(ctx context.Context) []string {
	e.t.Helper()
	groups, err := e.sb.DumpGroups(ctx, "br-ex")
	if err != nil {
		e.t.Fatal(err)
	}
	return append(e.dump(ctx, "br-ex"), groups...)
}

// mirrorOf returns the engine's state of an unmanaged bridge.
func (e *env) mirrorOf(name string) (restore.BridgeStatus, bool) {
	for _, m := range e.Daemon.Mirrors() {
		if m.Name == name {
			return m, true
		}
	}
	return restore.BridgeStatus{}, false
}

// waitMirrored waits until the mirror of br-ex holds n entries.
func (e *env) waitMirrored(ctx context.Context, n int) {
	e.t.Helper()
	poll(ctx, e.t, "br-ex mirrored", func() (bool, error) {
		m, ok := e.mirrorOf("br-ex")
		return ok && m.Mirror.Entries == n && !m.Mirror.Updated.IsZero(), nil
	})
}

// checkExForwarding shows the operator's flows at work: the forbidden SYN
// goes nowhere, the group sends to p3 only, NORMAL floods the rest.
func (e *env) checkExForwarding(ctx context.Context) {
	e.t.Helper()
	tx2, tx3 := e.txOf(ctx, "br-ex", "p2"), e.txOf(ctx, "br-ex", "p3")
	e.injectOn(ctx, "br-ex", forbidden)
	e.injectOn(ctx, "br-ex", viaGroup)
	poll(ctx, e.t, "SYN through group 1 to p3", func() (bool, error) { return e.txOf(ctx, "br-ex", "p3") == tx3+1, nil })
	if got := e.txOf(ctx, "br-ex", "p2"); got != tx2 {
		e.t.Fatalf("br-ex forwarded the forbidden SYN to p2 (tx %d -> %d)", tx2, got)
	}
	e.injectOn(ctx, "br-ex", sandbox.Packet{SrcPort: 43000})
	poll(ctx, e.t, "NORMAL floods to p2", func() (bool, error) { return e.txOf(ctx, "br-ex", "p2") == tx2+1, nil })
}

// TestUnmanagedBridgeRestored: an operator's br-ex, which flowstated does not
// manage, comes back from a crash of vswitchd (re-armed flag, plain start)
// with exactly its flows and group, and the SYN its flows drop never goes
// out, neither while held nor after.
func TestUnmanagedBridgeRestored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newExEnv(ctx, t)
	before := e.exState(ctx)
	if len(before) != 4 {
		t.Fatalf("br-ex holds %q, want the operator's 2 flows, NORMAL and a group", before)
	}
	e.checkExForwarding(ctx)
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	e.waitMirrored(ctx, 4)
	poll(ctx, t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	if got := e.exState(ctx); !slices.Equal(got, before) {
		t.Fatalf("mirroring changed br-ex:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(before, "\n"))
	}

	for round := range 2 {
		if err := e.sb.KillVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			// Keep flowstated off br-int so the held window stays open
			// and br-ex's restore inside it can be observed, not raced.
			if out, err := e.sb.Vsctl(ctx, "--no-wait", "set", "bridge", "br-int", "protocols=OpenFlow13"); err != nil {
				t.Fatal(err, out)
			}
		}
		if err := e.sb.StartVswitchd(ctx); err != nil { // plain start; the re-armed flag holds it
			t.Fatal(err)
		}
		if round == 0 {
			poll(ctx, t, "br-ex restored while held", func() (bool, error) {
				m, ok := e.mirrorOf("br-ex")
				return ok && m.Converged && m.Mirror.Restored, nil
			})
			if got := e.exState(ctx); !slices.Equal(got, before) {
				t.Fatalf("round %d: br-ex restored as\n%s\nwant\n%s", round, strings.Join(got, "\n"), strings.Join(before, "\n"))
			}
			e.injectOn(ctx, "br-ex", forbidden)
			e.injectOn(ctx, "br-ex", viaGroup)
			if tx2, tx3 := e.txOf(ctx, "br-ex", "p2"), e.txOf(ctx, "br-ex", "p3"); tx2+tx3 != 0 {
				t.Fatalf("held vswitchd forwarded on br-ex (p2 %d, p3 %d)", tx2, tx3)
			}
			if out, err := e.sb.Vsctl(ctx, "clear", "bridge", "br-int", "protocols"); err != nil {
				t.Fatal(err, out)
			}
		}
		// Forbidden SYNs all along; one through the group tells when
		// vswitchd forwards again. p2 would see the forbidden ones if
		// NORMAL had switched them at any point.
		poll(ctx, t, "br-ex forwards again", func() (bool, error) {
			e.injectOn(ctx, "br-ex", forbidden)
			e.injectOn(ctx, "br-ex", viaGroup)
			if tx := e.txOf(ctx, "br-ex", "p2"); tx != 0 {
				t.Fatalf("round %d: a forbidden SYN reached p2 (%d)", round, tx)
			}
			return e.txOf(ctx, "br-ex", "p3") > 0, nil
		})
		for range 3 {
			e.injectOn(ctx, "br-ex", forbidden)
		}
		if tx := e.txOf(ctx, "br-ex", "p2"); tx != 0 {
			t.Fatalf("round %d: a forbidden SYN reached p2 after the restore (%d)", round, tx)
		}
		if got := e.exState(ctx); !slices.Equal(got, before) {
			t.Fatalf("round %d: br-ex after the restart holds\n%s\nwant\n%s", round, strings.Join(got, "\n"), strings.Join(before, "\n"))
		}
		e.assertExact(ctx, pipeline)
		e.checkExForwarding(ctx)
		poll(ctx, t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	}
}

// TestUnmanagedRebuiltNotWritten (issue 21, item 13): br-ex rebuilt empty on
// a running, released vswitchd (its datapath_type changed) drops the mirror's
// connection while the re-armed flag reads true. flowstated does not take
// that for a held restart: br-ex is not written to, and the mirror re-learns
// what the bridge holds now. A real restart of vswitchd afterwards still gets
// br-ex back, with what the operator put on it since.
func TestUnmanagedRebuiltNotWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newExEnv(ctx, t)
	// br-ex is the only unmanaged bridge, so no other mirror's connection
	// survives the rebuild to tell that vswitchd still runs.
	if out, err := e.sb.Vsctl(ctx, "del-br", "br-ref"); err != nil {
		t.Fatal(err, out)
	}
	before := e.exState(ctx)
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	e.waitMirrored(ctx, len(before))
	poll(ctx, t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	pid := e.sb.VswitchdPID()

	// The dummy datapath stands in for both types (--enable-dummy=override):
	// vswitchd destroys br-ex and creates it anew, empty.
	if out, err := e.sb.Vsctl(ctx, "set", "bridge", "br-ex", "datapath_type=netdev"); err != nil {
		t.Fatal(err, out)
	}
	poll(ctx, t, "the mirror re-learns the rebuilt br-ex", func() (bool, error) {
		m, ok := e.mirrorOf("br-ex")
		if ok && m.Mirror.Restored {
			t.Fatalf("br-ex state %+v: restored onto a running vswitchd", m)
		}
		return ok && m.Converged && m.Mirror.Entries == 1, nil
	})
	if got := e.exState(ctx); !slices.Equal(got, []string{"priority=0 actions=NORMAL"}) {
		t.Fatalf("br-ex rebuilt on a running vswitchd holds %q, want what vswitchd made", got)
	}
	if m, _ := e.mirrorOf("br-ex"); m.Mirror.Restored {
		t.Fatalf("br-ex state %+v: restored onto a running vswitchd", m)
	}
	if got := e.sb.VswitchdPID(); got != pid {
		t.Fatalf("vswitchd pid %d -> %d: the bridge was to be rebuilt on a running vswitchd", pid, got)
	}
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil || !on {
		t.Fatalf("flag %v (%v): the test needs the re-armed flag reading true", on, err)
	}

	// A new flowstated (same store) on the same vswitchd: a rebuild is
	// still not a restart.
	e.Stop()
	e.Start(ctx)
	poll(ctx, t, "the new flowstated mirrors br-ex", func() (bool, error) {
		m, ok := e.mirrorOf("br-ex")
		return ok && m.Converged && m.Mirror.Entries == 1, nil
	})
	poll(ctx, t, "flag re-armed by the new flowstated", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	if out, err := e.sb.Vsctl(ctx, "set", "bridge", "br-ex", "datapath_type=dummy"); err != nil {
		t.Fatal(err, out)
	}
	if out, err := e.sb.Ofctl(ctx, "add-flow", "br-ex", "priority=5,arp,actions=NORMAL"); err != nil {
		t.Fatal(err, out)
	}
	poll(ctx, t, "the new flowstated's mirror re-learns br-ex rebuilt again", func() (bool, error) {
		m, ok := e.mirrorOf("br-ex")
		if ok && m.Mirror.Restored {
			t.Fatalf("br-ex state %+v: restored onto a running vswitchd", m)
		}
		return ok && m.Converged && m.Mirror.Entries == 2, nil
	})
	if out, err := e.sb.Ofctl(ctx, "del-flows", "br-ex", "arp"); err != nil {
		t.Fatal(err, out)
	}

	// The operator puts the flows back; the mirror follows; a crash of
	// vswitchd brings them back.
	if out, err := e.sb.Ofctl(ctx, "add-group", "br-ex", exGroup); err != nil {
		t.Fatal(err, out)
	}
	for _, f := range exFlows {
		if out, err := e.sb.Ofctl(ctx, "add-flow", "br-ex", f); err != nil {
			t.Fatal(err, out)
		}
	}
	e.waitMirrored(ctx, len(before))
	if err := e.sb.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "br-ex restored after the restart", func() (bool, error) {
		m, ok := e.mirrorOf("br-ex")
		return ok && m.Converged && m.Mirror.Restored, nil
	})
	if got := e.exState(ctx); !slices.Equal(got, before) {
		t.Fatalf("br-ex after the restart holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(before, "\n"))
	}
	e.checkExForwarding(ctx) // polls until the held vswitchd is released
}

// TestMirrorFollowsChange (issue 21, item 15): an idle unmanaged bridge is
// not dumped again, interval after interval (before OVS 3.0, which has no
// flow monitor to say when, it is, every interval); a flow added or deleted by
// another client (the flow monitor reports it) and a group added (groups are
// checked alone each interval) each reach the mirror.
func TestMirrorFollowsChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newExEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	e.waitMirrored(ctx, 4)
	m, _ := e.mirrorOf("br-ex")
	if noFlowMonitor(e.vswitchdBuild(ctx)) {
		// Before OVS 3.0: no monitor to tell of a change, so every
		// interval dumps (serveMirror), and none is quiet.
		poll(ctx, t, "ten dumping intervals", func() (bool, error) {
			now, _ := e.mirrorOf("br-ex")
			if now.Mirror.Quiet != 0 {
				t.Fatalf("br-ex without a flow monitor had %d quiet intervals", now.Mirror.Quiet)
			}
			return now.Mirror.Dumps >= m.Mirror.Dumps+10, nil
		})
	} else {
		poll(ctx, t, "ten quiet intervals", func() (bool, error) {
			now, _ := e.mirrorOf("br-ex")
			if now.Mirror.Dumps != m.Mirror.Dumps {
				t.Fatalf("idle br-ex dumped again: %d full dumps, then %d", m.Mirror.Dumps, now.Mirror.Dumps)
			}
			return now.Mirror.Quiet >= m.Mirror.Quiet+10, nil
		})
	}
	for _, step := range []struct {
		what, cmd, arg string
		entries        int
	}{
		{"a flow added", "add-flow", "priority=150,ip,nw_dst=10.0.0.7,actions=drop", 5},
		{"a group added", "add-group", "group_id=2,type=all,bucket=output:2", 6},
		{"a flow deleted", "del-flows", "ip,nw_dst=10.0.0.7", 5},
	} {
		if out, err := e.sb.Ofctl(ctx, step.cmd, "br-ex", step.arg); err != nil {
			t.Fatal(err, out)
		}
		poll(ctx, t, step.what+" mirrored", func() (bool, error) {
			now, _ := e.mirrorOf("br-ex")
			return now.Mirror.Entries == step.entries, nil
		})
	}
}

// TestUnmanagedIgnore: with --unmanaged-bridges=ignore, br-ex is left alone
// and comes back from a restart as vswitchd makes it, NORMAL only.
func TestUnmanagedIgnore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newExEnv(ctx, t, func(c *server.Config) { c.UnmanagedBridges = "ignore" })
	e.Start(ctx)
	e.WaitConverged(ctx)
	poll(ctx, t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	if ms := e.Daemon.Mirrors(); len(ms) != 0 {
		t.Fatalf("ignore mirrors %v", ms)
	}
	if err := e.sb.KillVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "br-ex forwards again (NORMAL)", func() (bool, error) {
		e.injectOn(ctx, "br-ex", sandbox.Packet{})
		return e.txOf(ctx, "br-ex", "p2") > 0, nil
	})
	if got := e.exState(ctx); !slices.Equal(got, []string{"priority=0 actions=NORMAL"}) {
		t.Fatalf("ignored br-ex holds %q, want only the default NORMAL flow", got)
	}
}

// TestMirrorPersisted: the mirror outlives flowstated. vswitchd restarts
// gated while flowstated is down; the flowstated started afterwards restores
// br-ex from the stored mirror, not from the empty bridge it finds.
func TestMirrorPersisted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Without re-arming, the flag seen cleared tells the restore is over.
	e := newExEnv(ctx, t, func(c *server.Config) { c.RearmFlowRestoreWait = false })
	before := e.exState(ctx)
	e.Start(ctx)
	e.WaitConverged(ctx)
	e.waitMirrored(ctx, len(before))
	e.Stop()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := e.exState(ctx); !slices.Equal(got, []string{"priority=0 actions=NORMAL"}) {
		t.Fatalf("restarted vswitchd holds %q on br-ex, want the default flow only", got)
	}
	e.Start(ctx)
	e.waitRestored(ctx)
	if got := e.exState(ctx); !slices.Equal(got, before) {
		t.Fatalf("br-ex after the restore holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(before, "\n"))
	}
	if m, ok := e.mirrorOf("br-ex"); !ok || !m.Mirror.Restored || m.Last.Adds != 3 || m.Last.Changes() != 3 {
		t.Fatalf("br-ex mirror state %+v, want restored with 3 adds (2 flows, the group; the default flow stays)", m)
	}
	e.checkExForwarding(ctx)
}

// TestUnmanagedMaxHold: an unmanaged bridge that never comes back holds the
// flag for MaxHold at most, then the switch is released without it.
func TestUnmanagedMaxHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const maxHold = time.Second
	e := newExEnv(ctx, t, func(c *server.Config) { c.RearmFlowRestoreWait, c.MaxHold = false, maxHold })
	e.Start(ctx)
	e.WaitConverged(ctx)
	e.waitMirrored(ctx, 4)
	e.Stop()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	// br-ex's management socket is gone: flowstated cannot reach it.
	if err := os.Remove(e.sb.MgmtPath("br-ex")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.Start(ctx)
	e.waitRestored(ctx)
	if held := time.Since(start); held < maxHold {
		t.Fatalf("flag cleared after %v, before br-ex's max hold of %v", held, maxHold)
	}
	if m, ok := e.mirrorOf("br-ex"); !ok || m.Connected || m.Converged {
		t.Fatalf("br-ex state %+v, want mirrored, not connected", m)
	}
}

// TestUnmanagedRestoreRefused: a mirror the switch refuses is given up at
// once (no max hold): br-ex forwards as vswitchd made it.
func TestUnmanagedRestoreRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newExEnv(ctx, t, func(c *server.Config) { c.RearmFlowRestoreWait, c.MaxHold = false, time.Minute })
	e.Start(ctx)
	e.WaitConverged(ctx)
	e.waitMirrored(ctx, 4)
	e.Stop()
	if err := e.sb.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	// Table 0 of br-ex now takes one flow: the default one fills it.
	if out, err := e.sb.Vsctl(ctx, "--no-wait", "--", "--id=@ft", "create", "Flow_Table", "flow_limit=1", "overflow_policy=refuse",
		"--", "set", "Bridge", "br-ex", "flow_tables:0=@ft"); err != nil {
		t.Fatal(err, out)
	}
	if err := e.sb.SetFlowRestoreWait(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := e.sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.Start(ctx)
	e.waitRestored(ctx)
	if held := time.Since(start); held > 30*time.Second {
		t.Fatalf("a refused mirror held the flag for %v", held)
	}
	m, ok := e.mirrorOf("br-ex")
	if !ok || m.Mirror.Restored || m.Last.Err == nil || !strings.Contains(m.Last.Err.Error(), "TABLE_FULL") {
		t.Fatalf("br-ex state %+v, want a refused restore naming OFPFMFC_TABLE_FULL", m)
	}
	if got := e.exState(ctx); !slices.Equal(got, []string{"priority=0 actions=NORMAL"}) {
		t.Fatalf("br-ex after a refused restore holds %q, want what vswitchd made", got)
	}
}
