package ofconn

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkBundle10k measures one bundle of 10,000 flows (encode excluded), from the first write to the commit
// reply, against a private vswitchd. Each iteration replaces the same flows.
func BenchmarkBundle10k(b *testing.B) {
	ctx, s := startOVS(b)
	c := dial(ctx, b, s, Options{Logger: discardLogger()})
	msgs := ipFlows(b, 0, 100, 0, 10000)
	b.ResetTimer()
	for b.Loop() {
		if err := c.Bundle(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(msgs)*b.N)/b.Elapsed().Seconds(), "flows/s")
}

// BenchmarkBundleOne measures a bundle of one flow, from the first write to the commit reply: a sequential
// single-flow Put's time at the switch. Each iteration replaces the same flow.
func BenchmarkBundleOne(b *testing.B) {
	ctx, s := startOVS(b)
	c := dial(ctx, b, s, Options{Logger: discardLogger()})
	msgs := ipFlows(b, 0, 100, 0, 1)
	for b.Loop() {
		if err := c.Bundle(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
}

// TestThroughput installs and dumps FLOWSTATE_BENCH_FLOWS flows (e.g. 200000) in one bundle and logs the rates,
// for docs/benchmarks.md. It is skipped unless the variable is set: it is a measurement, not a check.
func TestThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FLOWSTATE_BENCH_FLOWS"))
	if n <= 0 {
		t.Skip("set FLOWSTATE_BENCH_FLOWS=200000 to measure bundle and dump throughput")
	}
	ctx, s := startOVS(t)
	c := dial(ctx, t, s, Options{Logger: discardLogger()})
	start := time.Now()
	msgs := ipFlows(t, 0, 100, 0, n)
	encode := time.Since(start)

	start = time.Now()
	if err := c.Bundle(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	bundle := time.Since(start)

	start = time.Now()
	flows, err := c.DumpFlows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dump := time.Since(start)
	if len(flows) != n+1 {
		t.Fatalf("dumped %d flows, want %d", len(flows), n+1)
	}
	for _, f := range flows {
		if f.Err != nil {
			t.Fatal(f.Err)
		}
	}
	st := c.Stats()
	t.Logf("%d flows: encode %v; bundle %v (%.0f flows/s, %.1f MB sent); dump+decode %v (%.0f flows/s)",
		n, encode.Round(time.Millisecond), bundle.Round(time.Millisecond), float64(n)/bundle.Seconds(),
		float64(st.BytesSent)/1e6, dump.Round(time.Millisecond), float64(n)/dump.Seconds())
}
