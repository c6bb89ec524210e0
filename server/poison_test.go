package server_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/store"
)

// supervisor restarts vswitchd whenever it exits, as systemd's
// Restart=always would, and counts its starts.
type supervisor struct {
	starts atomic.Int32
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// Like systemd's RestartSec, it does not restart at once: it waits until
// flowstated saw the connection drop (bridge disconnected in status), as
// StartVswitchd removes the pidfile a crashed vswitchd leaves.
func superviseVswitchd(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, c *client.Client) *supervisor {
	ctx, cancel := context.WithCancel(ctx)
	s := &supervisor{stop: cancel}
	s.wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if sb.VswitchdPID() != 0 {
				continue
			}
			if st, err := c.Status(ctx); err == nil && len(st.Bridges) > 0 && st.Bridges[0].Connected {
				continue
			}
			s.starts.Add(1)
			// A start that the replay crashes before it is ready fails;
			// the next tick starts another.
			if err := sb.StartVswitchd(ctx); err != nil && ctx.Err() == nil {
				t.Logf("supervisor: start of vswitchd: %v", err)
			}
		}
	})
	t.Cleanup(s.close)
	return s
}

func (s *supervisor) close() {
	s.stop()
	s.wg.Wait()
}

// TestPoisonEntryBisected (issue 21, must-show 4): entries that crash
// ovs-vswitchd at every replay, written into the store behind flowstated's
// back with harmless ones, cost two crashes; the third vswitchd start
// forwards with everything else restored and the flag released. The
// suspects are then bisected across restarts (each probe only after
// vswitchd survived the previous replay) until the harmless ones are all on
// the switch and the crashing one is quarantined and named, in status, the
// event log and a metric. It stays out across vswitchd and flowstated
// restarts.
func TestPoisonEntryBisected(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.RearmFlowRestoreWait = true
		c.SurviveAfter = 500 * time.Millisecond
	})
	e.Start(ctx)
	e.WaitConverged(ctx)
	pods := make([]string, 40)
	for i := range pods {
		pods[i] = fmt.Sprintf("table=3,priority=200,ip,nw_src=10.1.0.%d,actions=normal", i+1)
	}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, texts(pods)...); err != nil {
		t.Fatal(err)
	}
	// A replay vswitchd survives leaves the digest of what it holds.
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "a replay vswitchd survived", func() (bool, error) {
		return e.metric(ctx, "flowstate_replays_survived_total") >= 1, nil
	})
	e.Stop()

	// Behind flowstated's back: the crashing flow and three harmless ones.
	later := []string{
		"table=3,priority=300,ip,nw_dst=10.9.0.1,actions=normal",
		"table=3,priority=300,ip,nw_dst=10.9.0.2,actions=normal",
		"table=3,priority=300,ip,nw_dst=10.9.0.3,actions=normal",
	}
	poison := testenv.CrashingLearn(t, 7, "pod")
	st, err := store.Open(e.Config.DBPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	laterEntries := make([]entry.Entry, len(later))
	for i, l := range later {
		payload, err := ofctl.ParseFlowBinary(l)
		if err != nil {
			t.Fatal(err)
		}
		canonical, id, err := entry.Identify(entry.KindFlow, payload)
		if err != nil {
			t.Fatal(err)
		}
		laterEntries[i] = entry.Entry{Kind: entry.KindFlow, ID: id, Payload: canonical, Module: "pod"}
	}
	if err := st.Update(func(w *store.Writer) error {
		_, err := w.Put("br-int", "pod", append(laterEntries, poison))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	sup := superviseVswitchd(ctx, t, e.sb, e.c)
	begin := time.Now() // the store keeps the earlier releases
	e.Start(ctx)
	poll(ctx, t, "the node released after vswitchd crashes", func() (bool, error) {
		st, err := e.c.Status(ctx)
		return err == nil && st.LastRelease.After(begin), nil
	})
	crashes := e.vswitchdAborts()
	t.Logf("released after %d vswitchd crashes (%d starts)", crashes, sup.starts.Load())
	if crashes != 2 {
		t.Fatalf("node released after %d crashes, want exactly 2 (the second holds the suspects out)", crashes)
	}
	// Released with everything else: the flows declared before.
	have := map[string]bool{}
	for _, f := range e.dump(ctx, "br-int") {
		have[f] = true
	}
	e.oracle(ctx, slices.Concat(pipeline, pods))
	for _, f := range e.dump(ctx, "br-ref") {
		if !have[f] {
			t.Fatalf("released without %s", f)
		}
	}

	// The bisection sends the suspects back one probe at a time: in the end
	// every harmless flow is on the switch and the crashing one named.
	poll(ctx, t, "the crashing flow found and every other flow restored", func() (bool, error) {
		st, err := e.c.Status(ctx)
		if err != nil || len(st.Bridges) == 0 || !st.Bridges[0].Converged || e.sb.VswitchdPID() == 0 {
			return false, nil
		}
		return len(st.Quarantined) == 1 && strings.Contains(st.Quarantined[0].Error, "crashed ovs-vswitchd") &&
			e.metric(ctx, "flowstate_crash_suspects") == 0, nil
	})
	t.Logf("bisection over after %d vswitchd crashes in all", e.vswitchdAborts())
	e.assertExact(ctx, slices.Concat(pipeline, pods, later))
	q := e.status(ctx).Quarantined
	if len(q) != 1 || !strings.Contains(q[0].Error, "crashed ovs-vswitchd") || !strings.Contains(q[0].Entry.Text, "in_port=7") {
		t.Fatalf("quarantined %+v, want the learn flow of in_port=7, named as crashing vswitchd", q)
	}
	series := regexp.MustCompile(`flowstate_poisoned_entry\{bridge="br-int",entry="([^"]*)",module="pod"\} 1`).FindStringSubmatch(e.Metrics(ctx))
	if series == nil || !strings.Contains(series[1], "in_port=7") {
		t.Fatalf("flowstate_poisoned_entry: %q, want a series naming the crashing flow", series)
	}
	any := e.watch(ctx, "", 0).next(ctx, t, func(client.Event) bool { return true })
	ev := e.watch(ctx, any.StreamID, 1).next(ctx, t, func(ev client.Event) bool {
		return ev.TypeName == "entry_quarantined" && strings.Contains(ev.Attrs["reason"], "crashed ovs-vswitchd")
	})
	if !strings.Contains(ev.Attrs["entry"], "in_port=7") {
		t.Fatalf("event %+v does not name the entry", ev)
	}

	// Durable: flowstated and vswitchd restarted, the flow stays out and
	// vswitchd up.
	sup.close()
	e.Stop()
	begin = time.Now()
	e.Start(ctx)
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	pid := e.sb.VswitchdPID()
	poll(ctx, t, "the replay after both restarts", func() (bool, error) {
		st, err := e.c.Status(ctx)
		return err == nil && st.LastRelease.After(begin) && st.Bridges[0].Converged, nil
	})
	e.assertExact(ctx, slices.Concat(pipeline, pods, later))
	if now := e.sb.VswitchdPID(); now != pid {
		t.Fatalf("vswitchd pid %d, then %d: it crashed after the crashing flow was found", pid, now)
	}
	if q := e.status(ctx).Quarantined; len(q) != 1 || !strings.Contains(q[0].Error, "crashed ovs-vswitchd") {
		t.Fatalf("after restarts quarantined %+v, want the crashing flow", q)
	}
}

// vswitchdAborts counts the aborts of vswitchd on the crashing learn() in
// its log, which every start of the sandbox appends to.
func (e *env) vswitchdAborts() int {
	e.t.Helper()
	b, err := os.ReadFile(e.sb.VswitchdLog())
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Count(string(b), "assertion len > 0 && len <= UINT16_MAX failed in ofpact_finish()")
}
