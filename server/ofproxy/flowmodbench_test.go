package ofproxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/store/storetest"
)

// BenchmarkSingleFlowMods measures a controller that sends plain FLOW_MODs,
// one flow each (ovs-testcontroller, an os-ken app), through flowstated's
// proxy against straight to vswitchd, in the same run (issue 35): b.N adds,
// each followed by a barrier it waits for (goal: at least 1,000/s through
// the proxy), then b.N adds with one barrier at the end (goal: at least 0.9×
// the direct throughput). The two targets alternate, rounds of each, and
// each round starts with b.N Updates of the fsync floor (storetest.Floor): a
// FLOW_MOD whose barrier is answered is durable, so the floor's rate bounds
// the first figure.
//
//	go test -run '^$' -bench SingleFlowMods -benchtime 10000x -count 1 ./server/ofproxy
func BenchmarkSingleFlowMods(b *testing.B) {
	const rounds = 2
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
	defer cancel()
	// The log goes to a file, as a production flowstated's goes to its
	// journal.
	e := testenv.New(ctx, b, testenv.Bridges("br-int", "br-direct"), testenv.LogToFile(), testenv.Configure(func(c *server.Config) {
		c.Proxies = []server.ProxySpec{{Module: "ctl", Bridge: "br-int"}}
	}))
	e.Start(ctx)
	e.WaitConverged(ctx)
	targets := []struct{ name, path string }{
		{"proxy", e.ProxySocket("br-int")},
		{"direct", e.Sandbox.MgmtPath("br-direct")},
	}
	fl := storetest.OpenFloor(b, e.Sandbox.Dir())
	var floor time.Duration
	conns := make([]*ofClient, len(targets))
	for i, t := range targets {
		conns[i] = dialOF(ctx, b, t.path)
	}
	flows := make([][]byte, 0, 2*rounds*b.N)
	for i := range cap(flows) {
		m, err := ofctl.ParseFlowBinary(fmt.Sprintf("table=1,priority=100,ip,nw_src=10.%d.%d.%d,actions=output:2", i>>16&0xff, i>>8&0xff, i&0xff))
		if err != nil {
			b.Fatal(err)
		}
		flows = append(flows, withXid(m, uint32(i+100)))
	}
	xid := uint32(1 << 30)
	barrier := func(c *ofClient) {
		xid++
		if got := c.untilBarrier(xid); len(got) != 0 {
			b.Fatalf("%d messages before the barrier reply, the first of type %d", len(got), got[0][1])
		}
	}
	each := make([]time.Duration, len(targets))  // adds, a barrier each
	burst := make([]time.Duration, len(targets)) // adds, one barrier at the end
	next := 0
	b.ResetTimer()
	for r := range rounds {
		for _, d := range fl.Updates(b.N) {
			floor += d
		}
		for k := range targets {
			i := (k + r) % len(targets) // who goes first alternates
			c, batch := conns[i], flows[next:next+b.N]
			start := time.Now()
			for _, m := range batch {
				c.send(m)
				barrier(c)
			}
			each[i] += time.Since(start)
			batch = flows[next+b.N : next+2*b.N]
			start = time.Now()
			c.send(batch...)
			barrier(c)
			burst[i] += time.Since(start)
		}
		next += 2 * b.N
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(rounds*b.N) / d.Seconds() }
	b.ReportMetric(rate(floor), "floor-updates/s")
	b.ReportMetric(rate(each[0]), "proxy-barrier-each/s")
	b.ReportMetric(rate(each[0])/rate(floor), "barrier-each/floor")
	b.ReportMetric(rate(each[1]), "direct-barrier-each/s")
	b.ReportMetric(rate(burst[0]), "proxy-no-barrier/s")
	b.ReportMetric(rate(burst[1]), "direct-no-barrier/s")
	b.ReportMetric(rate(burst[0])/rate(burst[1]), "no-barrier-proxy/direct")
}
