package mirror

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// mirrorBench starts a sandbox whose br-ex holds 1,000 flows installed with
// ovs-ofctl, and dials it.
func mirrorBench(ctx context.Context, b *testing.B) *ofconn.Conn {
	b.Helper()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		b.Fatalf("start OVS sandbox (%s): %v", sandbox.InstallHint, err)
	}
	b.Cleanup(func() { _ = sb.Close() })
	if err := sb.AddBridge(ctx, "br-ex"); err != nil {
		b.Fatal(err)
	}
	var flows strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&flows, "priority=100,tcp,nw_dst=10.%d.%d.1,tp_dst=%d,actions=drop\n", i/256, i%256, 1000+i)
	}
	file := filepath.Join(sb.Dir(), "flows.txt")
	if err := os.WriteFile(file, []byte(flows.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	if out, err := sb.Ofctl(ctx, "add-flows", "br-ex", file); err != nil {
		b.Fatal(err, out)
	}
	conn, err := ofconn.Dial(ctx, sb.MgmtPath("br-ex"), ofconn.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}

// cpuPerOp runs op b.N times and reports flowstated's CPU per op.
func cpuPerOp(b *testing.B, op func()) {
	var r0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	b.ResetTimer()
	for b.Loop() {
		op()
	}
	var r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) / time.Duration(b.N)
	b.ReportMetric(float64(cpu.Microseconds()), "cpu-µs/op")
}

// BenchmarkMirrorRefresh1k is one refresh of the mirror of an unmanaged
// bridge holding 1,000 flows: dump flows, groups and meters, canonicalise,
// hash and compare with the stored mirror (unchanged: no write), what an
// interval costs after a reported change. It reports flowstated's CPU per
// refresh too; docs/benchmarks.md quotes the figures.
func BenchmarkMirrorRefresh1k(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := mirrorBench(ctx, b)
	st, err := store.Open(filepath.Join(b.TempDir(), "flowstate.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	refresh := func() int {
		actual, err := plan.DumpAll(ctx, conn)
		if err != nil {
			b.Fatal(err)
		}
		es := make([]entry.Entry, len(actual))
		for i, a := range actual {
			es[i] = entry.Entry{Kind: a.Kind, ID: a.ID, Payload: a.Payload}
		}
		if _, err := st.Mirrors().Set("br-ex", es); err != nil {
			b.Fatal(err)
		}
		return len(es)
	}
	if n := refresh(); n != 1001 {
		b.Fatalf("mirrored %d entries, want 1,000 flows and the default one", n)
	}
	cpuPerOp(b, func() { refresh() })
}

// BenchmarkMirrorQuiet is one quiet interval of the mirror (serveMirror): no
// flow change reported, so only the groups and meters are dumped and hashed.
// Its cost does not depend on the bridge's flows.
func BenchmarkMirrorQuiet(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := mirrorBench(ctx, b)
	if _, err := conn.MonitorFlows(ctx); err != nil {
		b.Fatal(err)
	}
	cpuPerOp(b, func() {
		if _, err := dumpOthersHash(ctx, conn); err != nil {
			b.Fatal(err)
		}
	})
}
