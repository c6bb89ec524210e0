package server_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// TestProxyBusyResync: a controller behind the proxy reconnects (a clear,
// then its install) with its policy tightened meanwhile: the allow flow
// for 10.0.0.99 became a drop of the same identity, another flow changed
// its output, one it no longer wants is not installed again. Then it adds
// an unrelated flow every second, so it is never quiet. Every change its
// barrier acknowledged is in the store at once; the drop is on the switch
// at once (a probe SYN the policy denies is not forwarded); the other
// change and the clear's deletion reach the switch within 5 s however busy
// the controller stays.
func TestProxyBusyResync(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, proxy := proxyEnv(ctx, t)
	e.Start(ctx)

	const (
		allow   = "table=0,priority=100,tcp,nw_dst=10.0.0.99,actions=output:2"
		tighter = "table=0,priority=100,tcp,nw_dst=10.0.0.99,actions=drop"
		other   = "table=0,priority=90,tcp,nw_dst=10.0.0.98,actions=output:2"
		changed = "table=0,priority=90,tcp,nw_dst=10.0.0.98,actions=output:1"
		stale   = "table=0,priority=80,tcp,nw_dst=10.0.0.97,actions=output:2"
		base    = "table=0,priority=1,actions=drop"
	)
	for _, f := range []string{allow, other, stale, base} {
		e.ofctl(ctx, "add-flow", proxy, f)
	}
	e.WaitConverged(ctx)
	denied := sandbox.Packet{DstIP: "10.0.0.99", SrcPort: 40001}
	tx0 := e.txOf(ctx, "br-int", "p2")
	e.inject(ctx, denied)
	if e.txOf(ctx, "br-int", "p2") == tx0 {
		t.Fatal("the allow flow does not forward the probe before the policy changed")
	}

	// The reconnect: a clear, the install with the tightened policy.
	cleared := time.Now()
	e.ofctl(ctx, "del-flows", proxy)
	e.ofctl(ctx, "add-flow", proxy, base)
	e.ofctl(ctx, "add-flow", proxy, tighter)
	e.ofctl(ctx, "add-flow", proxy, changed)
	acked := time.Now()

	// Busy from now on: an unrelated flow a second.
	busyCtx, stopBusy := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var busyErr error
	wg.Go(func() {
		for i := 0; busyCtx.Err() == nil; i++ {
			f := "table=5,priority=10,tcp,tp_dst=" + strconv.Itoa(1000+i) + ",actions=drop"
			if out, err := e.sb.Ofctl(busyCtx, "add-flow", proxy, f); err != nil && busyCtx.Err() == nil {
				busyErr = err
				t.Logf("busy controller: %v %s", err, out)
				return
			}
			select {
			case <-busyCtx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	defer func() {
		stopBusy()
		wg.Wait()
	}()

	// Acknowledged is stored: nothing lives only in memory.
	es, err := e.c.List(ctx, client.Filter{Bridge: "br-int", Module: "tunnel"})
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, d := range es {
		stored = append(stored, d.Text)
	}
	for _, want := range []string{"nw_dst=10.0.0.99 actions=drop", "nw_dst=10.0.0.98 actions=output:1"} {
		if !strings.Contains(strings.Join(stored, "\n"), want) {
			t.Fatalf("right after the barrier replies the store lacks %q: it holds\n%s", want, strings.Join(stored, "\n"))
		}
	}

	// Stricter is never held back.
	if got := grepLines(e.dumpFlows(ctx), "nw_dst=10.0.0.99"); !strings.Contains(got, "actions=drop") {
		t.Fatalf("right after the barrier reply the switch holds %q for 10.0.0.99, want the drop", got)
	}
	tx1 := e.txOf(ctx, "br-int", "p2")
	e.inject(ctx, denied)
	if e.txOf(ctx, "br-int", "p2") != tx1 {
		t.Fatal("a SYN the tightened policy denies was forwarded after the barrier reply")
	}

	// The rest within 5 s, although the controller is never quiet.
	bound, cancelBound := context.WithDeadline(ctx, acked.Add(5*time.Second))
	defer cancelBound()
	poll(bound, t, "the changed flow and the clear's deletion on the switch within 5 s of the barrier", func() (bool, error) {
		d := e.dumpFlows(ctx)
		return strings.Contains(grepLines(d, "nw_dst=10.0.0.98"), "actions=output:1") && grepLines(d, "nw_dst=10.0.0.97") == "", nil
	})
	t.Logf("the switch had the held change and the deletion %v after the clear", time.Since(cleared).Round(time.Millisecond))
	if busyErr != nil {
		t.Fatalf("the busy controller's adds failed: %v", busyErr)
	}
	stopBusy()
	wg.Wait()
	e.WaitConverged(ctx)
	e.wantNoDiff(ctx, "after the busy resync")
}

func (e *env) dumpFlows(ctx context.Context) string {
	e.t.Helper()
	fs, err := e.sb.DumpFlows(ctx, "br-int")
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Join(fs, "\n")
}

// The flows of the proxied controller in the resync tests: resyncKeep and
// resyncBase are installed again after the clear, resyncStale is not.
const (
	resyncKeep  = "table=0,priority=100,tcp,nw_dst=10.0.0.99,actions=output:2"
	resyncStale = "table=0,priority=80,tcp,nw_dst=10.0.0.97,actions=output:2"
	resyncBase  = "table=0,priority=1,actions=drop"
)

// resyncStart starts flowstated with a proxy and installs the three
// resync flows through it, converged.
func resyncStart(ctx context.Context, t *testing.T) (*env, string) {
	t.Helper()
	e, proxy := proxyEnv(ctx, t)
	e.Start(ctx)
	for _, f := range []string{resyncKeep, resyncStale, resyncBase} {
		e.ofctl(ctx, "add-flow", proxy, f)
	}
	e.WaitConverged(ctx)
	return e, proxy
}

// TestProxyResyncClearStored: a controller behind the proxy clears and
// installs again without one of its flows, and gets its barrier replies.
// The store no longer holds that flow at once, while the switch keeps it
// until the end of the resync (traffic is not cut mid-install). flowstated
// stops before the end: after it starts again the flow, whose removal the
// barrier acknowledged, is neither stored nor replayed onto the switch.
func TestProxyResyncClearStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, proxy := resyncStart(ctx, t)

	// The reconnect: a clear alone (its own barrier), then the install
	// without the stale flow.
	e.ofctl(ctx, "del-flows", proxy)
	if got := strings.Join(e.stored(ctx, "tunnel"), "\n"); strings.Contains(got, "nw_dst=10.0.0.97") {
		t.Fatalf("right after the clear's barrier reply the store holds the flow it removed:\n%s", got)
	}
	e.ofctl(ctx, "add-flow", proxy, resyncBase)
	e.ofctl(ctx, "add-flow", proxy, resyncKeep)
	got := strings.Join(e.stored(ctx, "tunnel"), "\n")
	if strings.Contains(got, "nw_dst=10.0.0.97") || !strings.Contains(got, "nw_dst=10.0.0.99") {
		t.Fatalf("after the install's barrier replies the store holds\n%s\nwant 10.0.0.99 and not 10.0.0.97", got)
	}
	if grepLines(e.dumpFlows(ctx), "nw_dst=10.0.0.97") == "" {
		t.Fatal("the switch lost the stale flow before the end of the resync")
	}

	// Stopped before the resync's end (2 s of quiet): its deletion from
	// the switch never runs; the store must say it all.
	e.Stop()
	e.Start(ctx)
	e.WaitConverged(ctx)
	if got := strings.Join(e.stored(ctx, "tunnel"), "\n"); strings.Contains(got, "nw_dst=10.0.0.97") {
		t.Fatalf("after a restart the store holds a flow whose removal was acknowledged:\n%s", got)
	}
	poll(ctx, t, "the switch without the acknowledged removal, with the kept flow", func() (bool, error) {
		d := e.dumpFlows(ctx)
		return grepLines(d, "nw_dst=10.0.0.97") == "" && grepLines(d, "nw_dst=10.0.0.99") != "", nil
	})
	e.wantNoDiff(ctx, "after the restart")
}

// TestProxyResyncReplayed: a replay during a resync makes the switch what
// the store holds, so the flows the clear removed leave it then; one the
// controller installs again afterwards, as it was, is new to the switch
// and on it when its barrier reply comes, not taken for the copy the
// switch held before the replay.
func TestProxyResyncReplayed(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, proxy := resyncStart(ctx, t)

	e.inResync(ctx, func() time.Time {
		cleared := time.Now()
		e.ofctl(ctx, "del-flows", proxy)
		e.ofctl(ctx, "add-flow", proxy, resyncBase)
		e.ofctl(ctx, "add-flow", proxy, resyncKeep)
		if _, err := e.c.Reconcile(ctx, "br-int"); err != nil {
			t.Fatal(err)
		}
		if got := grepLines(e.dumpFlows(ctx), "nw_dst=10.0.0.97"); got != "" {
			t.Fatalf("after a replay during the resync the switch holds %q, which the store does not", got)
		}
		e.ofctl(ctx, "add-flow", proxy, resyncStale)
		if grepLines(e.dumpFlows(ctx), "nw_dst=10.0.0.97") == "" {
			t.Fatal("a flow installed again after the replay is not on the switch after its barrier reply")
		}
		return cleared
	})
	e.WaitConverged(ctx)
	e.wantNoDiff(ctx, "after the resync")
}

// inResync runs attempt, a scenario whose checks mean something only
// inside a resync (at most 4 s after its clear, the time attempt returns),
// until one ends within that: on a machine too loaded to make them in
// time, the scenario runs again, from the state the ended resync left.
func (e *env) inResync(ctx context.Context, attempt func() (cleared time.Time)) {
	e.t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		took := time.Since(attempt())
		if took < 4*time.Second {
			return
		}
		if i == attempts {
			e.t.Fatalf("%d attempts took %v or more from the clear to the last check: the resync (at most 4 s) had ended, nothing was tested", attempts, took.Round(time.Millisecond))
		}
		e.t.Logf("attempt %d took %v, past the resync's 4 s: again", i, took.Round(time.Millisecond))
		e.WaitConverged(ctx)
	}
}
