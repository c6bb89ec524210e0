package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
)

func texts(lines []string) []client.Entry {
	es := make([]client.Entry, len(lines))
	for i, l := range lines {
		es[i] = client.FlowText(l)
	}
	return es
}

func (e *env) status(ctx context.Context) *client.Status {
	e.t.Helper()
	st, err := e.c.Status(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) bridgeStatus(ctx context.Context, name string) *client.BridgeStatus {
	e.t.Helper()
	st := e.status(ctx)
	for i := range st.Bridges {
		if st.Bridges[i].Name == name {
			return &st.Bridges[i]
		}
	}
	e.t.Fatalf("no bridge %s in status", name)
	return nil
}

// assertExact checks br-int holds exactly what ovs-ofctl makes of flows.
func (e *env) assertExact(ctx context.Context, flows []string) {
	e.t.Helper()
	e.oracle(ctx, flows)
	want, got := e.dump(ctx, "br-ref"), e.dump(ctx, "br-int")
	if !slices.Equal(got, want) {
		e.t.Fatalf("br-int holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestReconcileIsIdempotent puts the whole test corpus through flowstate and
// shows that OVS's normalisation causes no spurious difference: a reconcile
// right after the put sends nothing.
func TestReconcileIsIdempotent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	corpus, refused := desiredOnly(t, readCorpus(t, "../ofctl/testdata/flows.txt"))
	if len(refused) == 0 {
		t.Fatal("the corpus holds no flow that is not desired state: the refusal is not shown")
	}
	var es []client.Entry
	for _, m := range readCorpus(t, "../ofctl/testdata/meters.txt") {
		es = append(es, client.MeterText(m))
	}
	for _, g := range readCorpus(t, "../ofctl/testdata/groups.txt") {
		es = append(es, client.GroupText(g))
	}
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "corpus"}, append(es, texts(corpus)...)...); err != nil {
		t.Fatal(err)
	}
	e.wantRefused(ctx, refused)
	// The oracle gets the same groups and meters first.
	for _, m := range readCorpus(t, "../ofctl/testdata/meters.txt") {
		if out, err := e.sb.Ofctl(ctx, "add-meter", "br-ref", m); err != nil {
			t.Fatal(err, out)
		}
	}
	if out, err := e.sb.Ofctl(ctx, "add-groups", "br-ref", "../ofctl/testdata/groups.txt"); err != nil {
		t.Fatal(err, out)
	}
	if out, err := e.sb.Ofctl(ctx, "del-flows", "br-ref"); err != nil {
		t.Fatal(err, out)
	}
	e.ofctlFlows(ctx, "add-flows", corpus)
	if want, got := e.dump(ctx, "br-ref"), e.dump(ctx, "br-int"); !slices.Equal(got, want) {
		t.Fatalf("br-int holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range 2 {
		resp, err := e.c.Reconcile(ctx, "br-int")
		if err != nil {
			t.Fatal(err)
		}
		if r := resp[0].LastReplay; r.Messages != 0 || r.Error != "" {
			t.Fatalf("reconcile %d after put sent %d messages (%v): spurious differences", i, r.Messages, r)
		}
	}
	changes, err := e.c.Diff(ctx, "br-int")
	if err != nil || len(changes) != 0 {
		t.Fatalf("diff after put: %v %v", changes, err)
	}
}

// TestDriftDiffAndAudit changes the switch behind flowstate's back: Diff shows
// it without fixing it, the periodic audit fixes it and says so.
func TestDriftDiffAndAudit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.AuditInterval = 300 * time.Millisecond })
	e.Start(ctx)
	e.WaitConverged(ctx)
	watch := e.watch(ctx, "", 0)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	// Both changes in one bundle, so one audit sees both.
	tamper := filepath.Join(e.dir, "tamper.txt")
	if err := os.WriteFile(tamper, []byte("delete_strict table=3,priority=100,ip\nadd table=9,priority=5,actions=drop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := e.sb.Ofctl(ctx, "--bundle", "add-flows", "br-int", tamper); err != nil {
		t.Fatal(err, out)
	}
	ev := watch.next(ctx, t, func(ev client.Event) bool { return ev.TypeName == "drift_corrected" })
	if ev.Attrs["changes"] != "2" {
		t.Fatalf("drift event %v, want 2 changes", ev)
	}
	e.assertExact(ctx, pipeline)
}

func TestDiffShowsWithoutApplying(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	if out, err := e.sb.Ofctl(ctx, "mod-flows", "br-int", "--strict", "table=3,priority=100,ip,actions=drop"); err != nil {
		t.Fatal(err, out)
	}
	if out, err := e.sb.Ofctl(ctx, "add-flow", "br-int", "table=9,priority=5,actions=drop"); err != nil {
		t.Fatal(err, out)
	}
	changes, err := e.c.Diff(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, c := range changes {
		ops = append(ops, c.Op.String()+" "+c.Actual+" => "+c.Desired)
	}
	if len(changes) != 2 || changes[0].Op != client.ChangeDelete || changes[1].Op != client.ChangeModify ||
		!strings.Contains(changes[1].Desired, "actions=NORMAL") || !strings.Contains(changes[0].Actual, "table=9") {
		t.Fatalf("diff:\n%s", strings.Join(ops, "\n"))
	}
	// Diff changed nothing.
	if got := e.dump(ctx, "br-int"); !strings.Contains(strings.Join(got, "\n"), "table=9") {
		t.Fatal("diff applied the changes")
	}
	if _, err := e.c.Reconcile(ctx, ""); err != nil {
		t.Fatal(err)
	}
	e.assertExact(ctx, pipeline)
}

// TestQuarantine stores an entry OVS refuses while the bridge is away; the
// replay leaves it out, commits the rest and reports it.
func TestQuarantine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// listMax is the bound of the quarantined entries a Status lists.
	var listMax atomic.Int32
	listMax.Store(1000)
	e := newEnv(ctx, t, func(c *server.Config) {
		c.Faults = &server.Faults{StatusQuarantined: func() int { return int(listMax.Load()) }}
	})
	e.Start(ctx)
	e.WaitConverged(ctx)
	if err := e.sb.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "br-int disconnected", func() (bool, error) {
		return !e.bridgeStatus(ctx, "br-int").Connected, nil
	})
	// The parser accepts a dscp_remark band; the dummy datapath refuses it
	// (as a newer OVS may refuse what an older one took). Table 7 takes one
	// flow only: the second is refused at commit.
	bad := client.MeterText("meter=7,kbps,band=type=dscp_remark,rate=100,prec_level=1")
	e.limitTable7(ctx, false)
	table7 := []string{"table=7,priority=1,ip,actions=drop", "table=7,priority=2,ip,actions=drop"}
	// Flows that use the refused meter are left out with it.
	var metered []string
	for i := range 12 {
		metered = append(metered, fmt.Sprintf("table=8,priority=%d,ip,actions=meter:7,output:2", i+1))
	}
	applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"},
		append(texts(slices.Concat(pipeline, table7, metered)), bad)...)
	if err != nil || applied {
		t.Fatalf("put while disconnected: applied=%v err=%v", applied, err)
	}
	watch := e.watch(ctx, "", 0)
	if err := e.sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	// The full table is predicted from OVSDB (or found at commit when
	// OVSDB answered late); the metered flows follow their meter.
	reasons := map[string]bool{}
	for !reasons["OFPMMFC_BAD_BAND"] || !reasons["OFPFMFC_TABLE_FULL"] || !reasons["OFPMMFC_INVALID_METER"] {
		ev := watch.next(ctx, t, func(ev client.Event) bool { return ev.TypeName == "entry_quarantined" })
		reason, _, _ := strings.Cut(ev.Attrs["reason"], " ")
		reasons[reason] = true
	}
	e.WaitConverged(ctx)
	e.assertExact(ctx, append(slices.Clone(pipeline), table7[0]))
	st := e.status(ctx)
	if len(st.Quarantined) != 2+len(metered) || st.QuarantinedTotal != 2+len(metered) {
		t.Fatalf("status quarantine = %v (total %d), want the meter, a table 7 flow and the %d flows using the meter", st.Quarantined, st.QuarantinedTotal, len(metered))
	}
	// Status lists the first entries only, and counts them all.
	listMax.Store(1)
	if st := e.status(ctx); len(st.Quarantined) != 1 || st.QuarantinedTotal != 2+len(metered) {
		t.Fatalf("status quarantine bounded to 1 = %v (total %d)", st.Quarantined, st.QuarantinedTotal)
	}
	listMax.Store(1000)
	if r := st.Bridges[0].LastReplay; r.Error != "" {
		t.Fatalf("replay with quarantined entries reported %q", r.Error)
	}
	if bs := e.bridgeStatus(ctx, "br-int"); bs.Flows != len(pipeline)+len(table7)+len(metered) {
		t.Fatalf("desired flows %d: quarantined entries must stay declared", bs.Flows)
	}
	// The module fixes it (flows use the meter: it cannot be deleted, only
	// replaced): the quarantine is lifted by the new write.
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, client.MeterText("meter=7,kbps,band=type=drop,rate=100")); err != nil {
		t.Fatal(err)
	}
	for _, q := range e.status(ctx).Quarantined {
		if strings.Contains(q.Entry.Text, "meter=7,") {
			t.Fatalf("meter still quarantined after its replacement: %v", q)
		}
	}
	// The next replay brings the flows using it back.
	if _, err := e.c.Reconcile(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	q := e.status(ctx).Quarantined
	if len(q) != 1 || !strings.Contains(q[0].Entry.Text, "priority=2") || !strings.HasPrefix(q[0].Error, "OFPFMFC_TABLE_FULL") {
		t.Fatalf("quarantine after replacing the meter = %v, want the table 7 flow only", q)
	}
	onSwitch := 0
	for _, f := range e.dump(ctx, "br-int") {
		if strings.Contains(f, "meter:7") {
			onSwitch++
		}
	}
	if onSwitch != len(metered) {
		t.Fatalf("%d flows using meter 7 on the switch after its replacement, want %d", onSwitch, len(metered))
	}
}

// TestColdStartGate: after a host reboot flowstated keeps the flag until every
// required module has synced and marked itself ready for this boot; stale
// entries a module does not re-declare are gone.
func TestColdStartGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) {
		c.RequiredModules = []string{"pipeline", "pod"}
		c.ReadinessTimeout = time.Minute
	})
	e.Start(ctx)
	podFlows := []string{
		"table=3,priority=200,ip,nw_dst=10.0.0.2,actions=output:2",
		"table=3,priority=200,ip,nw_dst=10.0.0.3,actions=output:2", // a pod that will be gone after the reboot
	}
	// First boot: modules declare and mark ready, the gate opens.
	if _, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pod"}, true, texts(podFlows)...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	e.assertExact(ctx, append(slices.Clone(pipeline), podFlows...))

	// The host reboots: new boot id, vswitchd comes back gated.
	e.Stop()
	if err := os.WriteFile(filepath.Join(e.dir, "boot_id"), []byte("second-boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	st := e.status(ctx)
	if !st.ColdStart || st.Gate.Open || !slices.Equal(st.Gate.WaitingFor, []string{"pipeline", "pod"}) {
		t.Fatalf("cold start status: %v", st)
	}
	// The pipeline module is ready; pod is not: still gated, nothing forwarded.
	if err := e.c.MarkReady(ctx, "pipeline"); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "gate waits only for pod", func() (bool, error) {
		return slices.Equal(e.status(ctx).Gate.WaitingFor, []string{"pod"}), nil
	})
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil || !on {
		t.Fatalf("flag cleared before pod was ready (%v)", err)
	}
	tx0 := e.txOf(ctx, "br-int", "p2")
	e.inject(ctx, sandbox.Packet{})
	if tx := e.txOf(ctx, "br-int", "p2"); tx != tx0 {
		t.Fatal("gated switch forwarded")
	}
	if got := e.dump(ctx, "br-int"); len(got) != 1 {
		t.Fatalf("replayed before the gate opened: %q", got)
	}
	// pod re-declares only the pod that still exists, and is ready.
	if _, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pod"}, true, texts(podFlows[:1])...); err != nil {
		t.Fatal(err)
	}
	e.waitRestored(ctx)
	e.assertExact(ctx, append(slices.Clone(pipeline), podFlows[0]))
	if g := e.status(ctx).Gate; !g.Open || g.TimedOut {
		t.Fatalf("gate = %v", g)
	}
}

func TestColdStartReadinessTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) {
		c.RequiredModules = []string{"never"}
		c.ReadinessTimeout = 500 * time.Millisecond
	})
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	watch := e.watch(ctx, "", 0)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	watch.next(ctx, t, func(ev client.Event) bool { return ev.TypeName == "readiness_timeout" })
	e.waitRestored(ctx)
	e.assertExact(ctx, pipeline)
	if g := e.status(ctx).Gate; !g.Open || !g.TimedOut || !strings.Contains(g.Reason, "never") {
		t.Fatalf("gate = %v", g)
	}
}

// TestResyncWhileForwarding: a module's new set replaces its old one in one
// bundle while the switch forwards.
func TestResyncWhileForwarding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)
	old := []string{"table=0,priority=10,ip,nw_src=10.1.0.1,actions=drop", "table=0,priority=10,ip,nw_src=10.1.0.2,actions=drop"}
	if _, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "policy"}, false, texts(old)...); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	next := []string{old[1], "table=0,priority=10,ip,nw_src=10.1.0.3,actions=drop"}
	res, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "policy"}, true, texts(next)...)
	if err != nil || !res.Applied {
		t.Fatalf("sync: applied=%v err=%v", res.Applied, err)
	}
	e.assertExact(ctx, append(slices.Clone(pipeline), next...))
	// The sync was applied as it returned: nothing is left for a replay.
	resp, err := e.c.Reconcile(ctx, "br-int")
	if err != nil || resp[0].LastReplay.Messages != 0 {
		t.Fatalf("reconcile after sync: %v %v", resp, err)
	}
}

// TestCrashProofGating: with the flag re-armed, vswitchd killed with -9 and
// started plainly comes back gated; a SYN to an address the pipeline drops
// never reaches another port, and allowed traffic flows after each restore.
func TestCrashProofGating(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.RearmFlowRestoreWait = true })
	e.Start(ctx)
	flows := append([]string{"table=0,priority=200,ip,nw_dst=10.0.0.99,actions=drop"}, pipeline...)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(flows)...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	poll(ctx, t, "flag re-armed", func() (bool, error) { return e.sb.FlowRestoreWait(ctx) })
	forbidden := sandbox.Packet{DstIP: "10.0.0.99"}
	for round := range 5 {
		if err := e.sb.KillVswitchd(ctx); err != nil {
			t.Fatal(err)
		}
		// Hold flowstated off the new vswitchd (no OpenFlow 1.5) so the
		// window before the restore can be observed, not raced.
		if out, err := e.sb.Vsctl(ctx, "--no-wait", "set", "bridge", "br-int", "protocols=OpenFlow13"); err != nil {
			t.Fatal(err, out)
		}
		if err := e.sb.StartVswitchd(ctx); err != nil { // plain start: nobody sets the flag
			t.Fatal(err)
		}
		// Counters restart with vswitchd. The switch came back gated by the
		// re-armed flag: neither a forbidden nor an allowed SYN goes out,
		// where the default NORMAL flow would have flooded both.
		e.inject(ctx, forbidden)
		e.inject(ctx, sandbox.Packet{SrcPort: uint16(42000 + round)})
		if tx := e.txOf(ctx, "br-int", "p2"); tx != 0 {
			t.Fatalf("round %d: a crash-restarted vswitchd forwarded %d packets before the restore", round, tx)
		}
		if on, err := e.sb.FlowRestoreWait(ctx); err != nil || !on {
			t.Fatalf("round %d: flag %v (%v) while nobody restored", round, on, err)
		}
		if out, err := e.sb.Vsctl(ctx, "clear", "bridge", "br-int", "protocols"); err != nil {
			t.Fatal(err, out)
		}
		poll(ctx, t, "restored", func() (bool, error) {
			b := e.bridgeStatus(ctx, "br-int")
			return b.Converged && b.LastReplay.Messages > 0, nil
		})
		e.assertExact(ctx, flows)
		poll(ctx, t, "flag cleared then re-armed", func() (bool, error) {
			on, err := e.sb.FlowRestoreWait(ctx)
			return on && e.status(ctx).Bridges[0].Converged, err
		})
		e.inject(ctx, forbidden)
		if tx := e.txOf(ctx, "br-int", "p2"); tx != 0 {
			t.Fatalf("round %d: %d forbidden packets reached p2", round, tx)
		}
		// Allowed traffic is forwarded once flowstated released the switch.
		e.inject(ctx, sandbox.Packet{SrcPort: uint16(41000 + round)})
		poll(ctx, t, "allowed SYN forwarded", func() (bool, error) {
			return e.txOf(ctx, "br-int", "p2") == 1, nil
		})
	}
	// A graceful stop disarms the flag.
	e.Stop()
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil || on {
		t.Fatalf("flag after graceful stop: %v %v", on, err)
	}
}

// TestFrozenVswitchd: a SIGSTOPped vswitchd is declared gone within 15 s and
// everything recovers after SIGCONT.
func TestFrozenVswitchd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.EchoInterval, c.EchoTimeout = 0, 0 }) // the defaults
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	if err := e.sb.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	dctx, dcancel := context.WithTimeout(ctx, 15*time.Second)
	poll(dctx, t, "frozen vswitchd declared gone", func() (bool, error) {
		return !e.bridgeStatus(ctx, "br-int").Connected, nil
	})
	dcancel()
	t.Logf("frozen vswitchd declared gone after %v", time.Since(frozen).Round(time.Millisecond))
	if err := e.sb.ThawVswitchd(); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	e.assertExact(ctx, pipeline)
}

// TestSeveralBridges: the flag is cleared only when every bridge converged.
func TestSeveralBridges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.Bridges = []string{"br-int", "br-ref"} })
	// br-ref refuses OpenFlow 1.5: flowstated cannot converge it.
	if out, err := e.sb.Vsctl(ctx, "set", "bridge", "br-ref", "protocols=OpenFlow13"); err != nil {
		t.Fatal(err, out)
	}
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "br-int converged", func() (bool, error) { return e.bridgeStatus(ctx, "br-int").Converged, nil })
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil || !on {
		t.Fatalf("flag cleared while br-ref is not converged (%v)", err)
	}
	if out, err := e.sb.Vsctl(ctx, "set", "bridge", "br-ref", "protocols=OpenFlow13,OpenFlow15"); err != nil {
		t.Fatal(err, out)
	}
	poll(ctx, t, "flag cleared", func() (bool, error) {
		on, err := e.sb.FlowRestoreWait(ctx)
		return !on, err
	})
	if got := e.dump(ctx, "br-ref"); len(got) != 0 {
		t.Fatalf("br-ref holds %q, want nothing (nothing declared)", got)
	}
}

// TestWatchResume: events carry revisions; a client resumes after its last
// one, and is told to resync when the stream is gone.
func TestWatchResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	w := e.watch(ctx, "", 0)
	e.WaitConverged(ctx)
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	hb := w.next(ctx, t, func(ev client.Event) bool { return ev.TypeName == "heartbeat" })
	if err := e.c.MarkReady(ctx, "pipeline"); err != nil {
		t.Fatal(err)
	}
	ready := w.next(ctx, t, func(ev client.Event) bool { return ev.TypeName == "module_ready" })
	if ready.Revision <= hb.Revision || ready.Module != "pipeline" {
		t.Fatalf("heartbeat %v then ready %v", hb, ready)
	}
	// Resume after the heartbeat's revision: the module_ready event again.
	w2 := e.watch(ctx, ready.StreamID, hb.Revision)
	again := w2.next(ctx, t, func(ev client.Event) bool { return ev.TypeName != "heartbeat" })
	if again.Revision != hb.Revision+1 {
		t.Fatalf("resumed at %d, want %d", again.Revision, hb.Revision+1)
	}
	// After a restart the stream is gone: resync.
	e.Stop()
	e.Start(ctx)
	err := e.c.Watch(ctx, ready.Cursor(), func(client.Event) error { return nil })
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "resync") {
		t.Fatalf("resume across a restart: %v", err)
	}
}

// watcher collects events of one Watch stream.
type watcher struct {
	ch   chan client.Event
	errc chan error
}

func (e *env) watch(ctx context.Context, stream string, from uint64) *watcher {
	w := &watcher{ch: make(chan client.Event, 1024), errc: make(chan error, 1)}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.errc <- e.c.Watch(wctx, client.Cursor{StreamID: stream, Revision: from}, func(ev client.Event) error {
			select {
			case w.ch <- ev:
			case <-wctx.Done():
			}
			return nil
		})
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *watcher) next(ctx context.Context, t *testing.T, match func(client.Event) bool) client.Event {
	t.Helper()
	for {
		select {
		case ev := <-w.ch:
			if match(ev) {
				return ev
			}
		case err := <-w.errc:
			t.Fatalf("watch ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("waiting for an event: %v", ctx.Err())
		}
	}
}

func readCorpus(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l := range strings.Lines(string(b)) {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no flows", path)
	}
	return out
}
