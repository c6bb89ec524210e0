package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/store"
)

// metric reads one per-bridge sample of br-int from /metrics.
func (e *env) metric(name string) int {
	e.t.Helper()
	resp, err := http.Get("http://" + e.d.MetricsAddr() + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	m := regexp.MustCompile(name + `\{bridge="br-int"\} (\d+)`).FindSubmatch(body)
	if m == nil {
		e.t.Fatalf("no %s in /metrics", name)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// refusalRestart stops flowstated, restarts vswitchd with flow-restore-wait
// set, starts flowstated and waits until the bridge is restored and the
// flag cleared. It returns the time that took and the first replay's
// finished event.
func (e *env) refusalRestart(ctx context.Context) (time.Duration, *flowstatev1.Event) {
	e.t.Helper()
	e.stopDaemon()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		e.t.Fatal(err)
	}
	start := time.Now()
	e.startDaemon(ctx)
	// Connected in status means the bridge_connected event is out: watch
	// from revision 1, which precedes the first replay's events.
	poll(ctx, e.t, "br-int connected", func() (bool, error) {
		st, err := e.c.Status(ctx)
		return err == nil && st.GetBridges()[0].GetConnected(), nil
	})
	any := e.watch(ctx, "", 0).next(ctx, e.t, func(*flowstatev1.Event) bool { return true })
	watch := e.watch(ctx, any.GetStreamId(), 1)
	ev := watch.next(ctx, e.t, func(ev *flowstatev1.Event) bool {
		return ev.GetType() == "replay_finished" && ev.GetBridge() == "br-int"
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
			e.startDaemon(ctx)
			e.waitConverged(ctx)
			const declared, limit = 5000, 1000
			// nw_src grows with i, and so does the identity's key order.
			pods := make([]string, declared)
			for i := range pods {
				pods[i] = fmt.Sprintf("table=7,priority=100,ip,nw_src=10.0.%d.%d,actions=resubmit(,3)", i/256, i%256)
			}
			if _, err := e.c.Put(ctx, "br-int", "pipeline", texts(pipeline)...); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.Put(ctx, "br-int", "pod", texts(pods)...); err != nil {
				t.Fatal(err)
			}
			if out, err := e.sb.Vsctl(ctx, "--", "--id=@ft", "create", "Flow_Table",
				fmt.Sprintf("flow_limit=%d", limit), "overflow_policy="+policy,
				"--", "set", "Bridge", "br-int", "flow_tables:7=@ft"); err != nil {
				t.Fatal(err, out)
			}

			took, ev := e.refusalRestart(ctx)
			t.Logf("policy %s: %d declared flows in a table of %d: restored and released in %v; first replay: %v",
				policy, declared, limit, took, ev.GetAttrs())
			if took > 30*time.Second {
				t.Fatalf("restore took %v, want under 30 s", took)
			}
			rounds, _ := strconv.Atoi(ev.GetAttrs()["rounds"])
			if ev.GetAttrs()["error"] != "" || rounds < 1 || rounds > 2 {
				t.Fatalf("first replay %v: want success in one round (predicted) or two (found at commit)", ev.GetAttrs())
			}
			e.assertExact(ctx, slices.Concat(pipeline, pods[:limit]))

			q := e.status(ctx).GetQuarantined()
			if len(q) != declared-limit {
				t.Fatalf("%d entries quarantined, want %d", len(q), declared-limit)
			}
			beyond := map[string]bool{}
			for _, p := range pods[limit:] {
				beyond[strings.TrimSuffix(strings.TrimPrefix(p, "table=7,priority=100,ip,nw_src="), ",actions=resubmit(,3)")] = true
			}
			for _, q := range q {
				_, src, _ := strings.Cut(q.GetEntry().GetText(), "nw_src=")
				src, _, _ = strings.Cut(src, " ")
				if !beyond[src] || !strings.HasPrefix(q.GetError(), "OFPFMFC_TABLE_FULL") {
					t.Fatalf("quarantined %q (%s): want the flows beyond the first %d in key order, refused as TABLE_FULL",
						q.GetEntry().GetText(), q.GetError(), limit)
				}
			}
			if n := e.metric("flowstate_quarantined_entries"); n != declared-limit {
				t.Fatalf("flowstate_quarantined_entries = %d, want %d", n, declared-limit)
			}
			if policy != "refuse" {
				return
			}

			// flowstated came up racing its OVSDB connection, so the first
			// replay may have found the full table at commit. With OVSDB
			// connected, a vswitchd restart is predicted: one round.
			any := e.watch(ctx, "", 0).next(ctx, t, func(*flowstatev1.Event) bool { return true })
			watch := e.watch(ctx, any.GetStreamId(), any.GetRevision())
			if err := e.sb.RestartVswitchd(ctx, true); err != nil {
				t.Fatal(err)
			}
			ev = watch.next(ctx, t, func(ev *flowstatev1.Event) bool {
				return ev.GetType() == "replay_finished" && ev.GetAttrs()["adds"] != "0"
			})
			e.waitRestored(ctx)
			t.Logf("vswitchd restarted with OVSDB connected: %v", ev.GetAttrs())
			if ev.GetAttrs()["error"] != "" || ev.GetAttrs()["rounds"] != "1" || ev.GetAttrs()["quarantined"] != strconv.Itoa(declared-limit) {
				t.Fatalf("replay after the vswitchd restart %v: want %d predicted in one round", ev.GetAttrs(), declared-limit)
			}
			e.assertExact(ctx, slices.Concat(pipeline, pods[:limit]))
			for _, q := range e.status(ctx).GetQuarantined() {
				if !strings.HasPrefix(q.GetError(), "OFPFMFC_TABLE_FULL (predicted): table 7 holds at most 1000 flows") {
					t.Fatalf("quarantined %q: %s", q.GetEntry().GetText(), q.GetError())
				}
			}
		})
	}
}

// TestRefusalMissingGroup: flows that use a group nobody declares any more
// are all quarantined in the first replay, and the rest converges.
func TestRefusalMissingGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" })
	e.startDaemon(ctx)
	e.waitConverged(ctx)
	const users = 3000
	flows := make([]string, users)
	for i := range flows {
		flows[i] = fmt.Sprintf("table=5,priority=100,ip,nw_dst=10.1.%d.%d,actions=group:5", i/256, i%256)
	}
	if _, err := e.c.Put(ctx, "br-int", "pipeline", texts(pipeline)...); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Put(ctx, "br-int", "lb", client.GroupText("group_id=5,type=all,bucket=output:2")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Put(ctx, "br-int", "pod", texts(flows)...); err != nil {
		t.Fatal(err)
	}

	// The group leaves the store behind flowstated's back (a store written
	// before groups in use were protected, or edited by hand): the flows
	// that use it stay declared.
	e.stopDaemon()
	st, err := store.Open(e.cfg.DBPath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(w *store.Writer) error {
		_, err := w.Delete("br-int", "lb", []entry.Entry{{Kind: entry.KindGroup, ID: entry.Ref{Kind: entry.KindGroup, ID: 5}.Key()}})
		return err
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	took, ev := e.refusalRestart(ctx)
	t.Logf("%d flows using a missing group: restored and released in %v; first replay: %v", users, took, ev.GetAttrs())
	if ev.GetAttrs()["error"] != "" || ev.GetAttrs()["rounds"] != "1" {
		t.Fatalf("first replay %v: want success in one round", ev.GetAttrs())
	}
	if took > 10*time.Second {
		t.Fatalf("restore took %v, want a few seconds", took)
	}
	e.assertExact(ctx, pipeline)
	q := e.status(ctx).GetQuarantined()
	if len(q) != users {
		t.Fatalf("%d entries quarantined, want %d", len(q), users)
	}
	for _, q := range q {
		if q.GetError() != "OFPBAC_BAD_OUT_GROUP (predicted): uses group 5, which is neither declared nor on the switch" {
			t.Fatalf("quarantined %q: %s", q.GetEntry().GetText(), q.GetError())
		}
	}
	if n := e.metric("flowstate_quarantined_entries"); n != users {
		t.Fatalf("flowstate_quarantined_entries = %d, want %d", n, users)
	}

	// The group is declared again: the next replay brings its flows back.
	if _, err := e.c.Put(ctx, "br-int", "lb", client.GroupText("group_id=5,type=all,bucket=output:2")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Reconcile(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	if q := e.status(ctx).GetQuarantined(); len(q) != 0 {
		t.Fatalf("%d entries still quarantined after the group came back", len(q))
	}
	if n := len(e.dump(ctx, "br-int")); n != len(pipeline)+users {
		t.Fatalf("br-int holds %d flows, want %d", n, len(pipeline)+users)
	}
	if n := e.metric("flowstate_quarantined_entries"); n != 0 {
		t.Fatalf("flowstate_quarantined_entries = %d, want 0", n)
	}
}
