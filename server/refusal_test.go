package server_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/server"
)

// metric reads one per-bridge sample of br-int from /metrics.
func (e *env) metric(ctx context.Context, name string) int {
	e.t.Helper()
	m := regexp.MustCompile(name + `\{bridge="br-int"\} (\d+)`).FindStringSubmatch(e.Metrics(ctx))
	if m == nil {
		e.t.Fatalf("no %s in /metrics", name)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// refusalRestart stops flowstated, restarts vswitchd with flow-restore-wait
// set, starts flowstated and waits until the bridge is restored and the
// flag cleared. It returns the time that took and the first replay's
// finished event.
func (e *env) refusalRestart(ctx context.Context) (time.Duration, client.Event) {
	e.t.Helper()
	e.Stop()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		e.t.Fatal(err)
	}
	start := time.Now()
	e.Start(ctx)
	// Connected in status means the bridge_connected event is out: watch
	// from revision 1, which precedes the first replay's events.
	poll(ctx, e.t, "br-int connected", func() (bool, error) {
		st, err := e.c.Status(ctx)
		return err == nil && st.Bridges[0].Connected, nil
	})
	any := e.watch(ctx, "", 0).next(ctx, e.t, func(client.Event) bool { return true })
	watch := e.watch(ctx, any.StreamID, 1)
	ev := watch.next(ctx, e.t, func(ev client.Event) bool {
		return ev.TypeName == "replay_finished" && ev.Bridge == "br-int"
	})
	e.waitRestored(ctx)
	return time.Since(start), ev
}

// TestRefusalTableLimit: thousands of flows beyond a table's flow_limit are
// quarantined in one replay, not one per round, and the rest of the node is
// restored and released within seconds. With overflow_policy refuse the
// refusals are predicted from OVSDB; with evict (permanent flows are never
// evicted, so OVS refuses them too) they are found at commit, where the first
// TABLE_FULL stands for every later add to that table.
func TestRefusalTableLimit(t *testing.T) {
	for _, policy := range []string{"refuse", "evict"} {
		t.Run(policy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			e := newEnv(ctx, t, func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" })
			e.Start(ctx)
			e.WaitConverged(ctx)
			const declared, limit = 5000, 1000
			// nw_src grows with i, and so does the identity's key order.
			pods := make([]string, declared)
			for i := range pods {
				pods[i] = fmt.Sprintf("table=7,priority=100,ip,nw_src=10.0.%d.%d,actions=resubmit(,3)", i/256, i%256)
			}
			if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, texts(pods)...); err != nil {
				t.Fatal(err)
			}
			if out, err := e.sb.Vsctl(ctx, "--", "--id=@ft", "create", "Flow_Table",
				fmt.Sprintf("flow_limit=%d", limit), "overflow_policy="+policy,
				"--", "set", "Bridge", "br-int", "flow_tables:7=@ft"); err != nil {
				t.Fatal(err, out)
			}

			took, ev := e.refusalRestart(ctx)
			t.Logf("policy %s: %d declared flows in a table of %d: restored and released in %v; first replay: %v",
				policy, declared, limit, took, ev.Attrs)
			if took > 30*time.Second {
				t.Fatalf("restore took %v, want under 30 s", took)
			}
			rounds, _ := strconv.Atoi(ev.Attrs["rounds"])
			if ev.Attrs["error"] != "" || rounds < 1 || rounds > 2 {
				t.Fatalf("first replay %v: want success in one round (predicted) or two (found at commit)", ev.Attrs)
			}
			e.assertExact(ctx, slices.Concat(pipeline, pods[:limit]))

			// Status lists the first 1,000 and counts them all.
			st := e.status(ctx)
			q := st.Quarantined
			if st.QuarantinedTotal != declared-limit || len(q) != min(declared-limit, 1000) {
				t.Fatalf("%d entries quarantined (%d listed), want %d", st.QuarantinedTotal, len(q), declared-limit)
			}
			beyond := map[string]bool{}
			for _, p := range pods[limit:] {
				beyond[strings.TrimSuffix(strings.TrimPrefix(p, "table=7,priority=100,ip,nw_src="), ",actions=resubmit(,3)")] = true
			}
			for _, q := range q {
				_, src, _ := strings.Cut(q.Entry.Text, "nw_src=")
				src, _, _ = strings.Cut(src, " ")
				if !beyond[src] || !strings.HasPrefix(q.Error, "OFPFMFC_TABLE_FULL") {
					t.Fatalf("quarantined %q (%s): want the flows beyond the first %d in key order, refused as TABLE_FULL",
						q.Entry.Text, q.Error, limit)
				}
			}
			if n := e.metric(ctx, "flowstate_quarantined_entries"); n != declared-limit {
				t.Fatalf("flowstate_quarantined_entries = %d, want %d", n, declared-limit)
			}
			if policy != "refuse" {
				return
			}

			// flowstated came up racing its OVSDB connection, so the first
			// replay may have found the full table at commit. With OVSDB
			// connected, a vswitchd restart is predicted: one round.
			any := e.watch(ctx, "", 0).next(ctx, t, func(client.Event) bool { return true })
			watch := e.watch(ctx, any.StreamID, any.Revision)
			if err := e.sb.RestartVswitchd(ctx, true); err != nil {
				t.Fatal(err)
			}
			ev = watch.next(ctx, t, func(ev client.Event) bool {
				return ev.TypeName == "replay_finished" && ev.Bridge == "br-int" && ev.Attrs["adds"] != "0"
			})
			e.waitRestored(ctx)
			t.Logf("vswitchd restarted with OVSDB connected: %v", ev.Attrs)
			if ev.Attrs["error"] != "" || ev.Attrs["rounds"] != "1" || ev.Attrs["quarantined"] != strconv.Itoa(declared-limit) {
				t.Fatalf("replay after the vswitchd restart %v: want %d predicted in one round", ev.Attrs, declared-limit)
			}
			e.assertExact(ctx, slices.Concat(pipeline, pods[:limit]))
			for _, q := range e.status(ctx).Quarantined {
				if !strings.HasPrefix(q.Error, "OFPFMFC_TABLE_FULL (predicted): table 7 holds at most 1000 flows") {
					t.Fatalf("quarantined %q: %s", q.Entry.Text, q.Error)
				}
			}
		})
	}
}

// TestRefusalUsersOfARefusedMeter: a meter the switch refuses takes the
// thousands of flows that use it out with it in the same replay (predicted,
// not found one commit error at a time), and the rest converges. The store
// never holds flows whose group or meter is not declared, so a refusal by
// the switch is how their users go missing.
func TestRefusalUsersOfARefusedMeter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" })
	e.Start(ctx)
	e.WaitConverged(ctx)
	const users = 3000
	flows := make([]string, users)
	for i := range flows {
		flows[i] = fmt.Sprintf("table=5,priority=100,ip,nw_dst=10.1.%d.%d,actions=meter:7,output:2", i/256, i%256)
	}
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	if err := e.sb.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	// Stored while the switch is away: the parser takes a dscp_remark band,
	// the dummy datapath refuses it.
	e.Start(ctx)
	bad := client.MeterText("meter=7,kbps,band=type=dscp_remark,rate=100,prec_level=1")
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, append(texts(flows), bad)...); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	if err := e.sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}

	took, ev := e.refusalRestart(ctx)
	t.Logf("%d flows using a refused meter: restored and released in %v; first replay: %v", users, took, ev.Attrs)
	if rounds, _ := strconv.Atoi(ev.Attrs["rounds"]); ev.Attrs["error"] != "" || rounds < 1 || rounds > 2 {
		t.Fatalf("first replay %v: want success in at most two rounds (the meter, then its users predicted)", ev.Attrs)
	}
	if took > 10*time.Second {
		t.Fatalf("restore took %v, want a few seconds", took)
	}
	e.assertExact(ctx, pipeline)
	st := e.status(ctx)
	q := st.Quarantined
	if st.QuarantinedTotal != users+1 || len(q) != 1000 {
		t.Fatalf("%d entries quarantined (%d listed), want the meter and its %d users", st.QuarantinedTotal, len(q), users)
	}
	for _, q := range q {
		meter := strings.HasPrefix(q.Error, "OFPMMFC_BAD_BAND")
		user := strings.HasPrefix(q.Error, "OFPMMFC_INVALID_METER (predicted)")
		if !meter && !user {
			t.Fatalf("quarantined %q: %s", q.Entry.Text, q.Error)
		}
	}
	if n := e.metric(ctx, "flowstate_quarantined_entries"); n != users+1 {
		t.Fatalf("flowstate_quarantined_entries = %d, want %d", n, users+1)
	}

	// The module fixes the meter: the next replay brings its flows back.
	if _, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pod"}, client.MeterText("meter=7,kbps,band=type=drop,rate=100")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Reconcile(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	if q := e.status(ctx).Quarantined; len(q) != 0 {
		t.Fatalf("%d entries still quarantined after the meter was fixed", len(q))
	}
	if n := len(e.dump(ctx, "br-int")); n != len(pipeline)+users {
		t.Fatalf("br-int holds %d flows, want %d", n, len(pipeline)+users)
	}
	if n := e.metric(ctx, "flowstate_quarantined_entries"); n != 0 {
		t.Fatalf("flowstate_quarantined_entries = %d, want 0", n)
	}
}
