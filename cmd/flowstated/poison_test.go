package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/store"
)

// TestCrashLoopBroken (issue 21, must-show 4, on the real binary): a flow
// that crashes ovs-vswitchd, written into the store behind flowstated's
// back, crashes it at the first replay; flowstated is then killed (SIGKILL)
// and started again, and remembers that death: the second crash holds the
// flow out, so the third vswitchd start forwards with the pipeline restored
// and the flow quarantined and named. It stays out at later starts.
func TestCrashLoopBroken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--rearm-flow-restore-wait", "--survive-after", "300ms")
	n.start(ctx)
	es := make([]client.Entry, len(guardPipeline))
	for i, f := range guardPipeline {
		es[i] = client.FlowText(f)
	}
	if _, err := n.c.Put(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, es...); err != nil {
		t.Fatal(err)
	}
	// A restore vswitchd survives: the digest of what it holds is kept.
	if err := n.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The replay of the pipeline survived: the first start's (of an empty
	// store) would leave the pipeline out of the digest, and suspects.
	n.poll(ctx, "a replay of the pipeline vswitchd survived", func() bool {
		l := n.logs.String()
		i := strings.Index(l, fmt.Sprintf("entries=%d adds=%d", len(guardPipeline), len(guardPipeline)))
		return i >= 0 && strings.Contains(l[i:], "ovs-vswitchd survived the replay")
	})
	n.signal(ctx, syscall.SIGTERM)

	st, err := store.Open(filepath.Join(n.dir, "state", "fs.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Update(func(w *store.Writer) error {
		_, err := w.Put("br-int", "pod", []entry.Entry{testenv.CrashingLearn(t, 9, "pod")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}

	// Crash 1, then flowstated killed and started again.
	n.start(ctx)
	n.poll(ctx, "the first death recorded", func() bool {
		return n.sb.VswitchdPID() == 0 && strings.Contains(n.logs.String(), "ovs-vswitchd died during or shortly after a replay")
	})
	n.signal(ctx, syscall.SIGKILL)
	n.start(ctx)
	startCrashing(ctx, t, n.sb)
	// Crash 2: the new flowstated counts it as the second.
	n.poll(ctx, "the second death recorded", func() bool {
		return n.sb.VswitchdPID() == 0 && strings.Contains(n.logs.String(), "ovs-vswitchd died twice")
	})
	third := time.Now() // the store keeps earlier releases
	if err := n.sb.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	pid := n.sb.VswitchdPID()
	n.poll(ctx, "released at the third vswitchd start", func() bool {
		st, err := n.c.Status(ctx)
		return err == nil && st.Bridges[0].Converged && st.LastRelease.After(third)
	})
	if !n.forwards(ctx, "br-int", sandbox.Packet{}, 5*time.Second) {
		t.Fatal("br-int does not forward after the third start")
	}
	if n.forwards(ctx, "br-int", sandbox.Packet{DstIP: "10.0.0.99"}, 300*time.Millisecond) {
		t.Fatal("br-int forwards what the pipeline drops: not restored")
	}
	checkCrashingNamed(ctx, t, n.c)
	if got := n.sb.VswitchdPID(); got != pid {
		t.Fatalf("vswitchd %d replaced by %d: it crashed again", pid, got)
	}
	aborts := countAborts(t, n.sb)
	t.Logf("vswitchd aborted %d times; flows on br-int: %v", aborts, n.dump(ctx, "br-int"))
	if aborts != 2 {
		t.Fatalf("vswitchd aborted %d times, want 2", aborts)
	}

	// Later starts: flowstated and vswitchd restarted, no crash.
	n.signal(ctx, syscall.SIGTERM)
	later := time.Now()
	n.start(ctx)
	if err := n.sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	n.poll(ctx, "restored after both restarts", func() bool {
		st, err := n.c.Status(ctx)
		return err == nil && st.Bridges[0].Converged && st.LastRelease.After(later)
	})
	checkCrashingNamed(ctx, t, n.c)
	if !slices.ContainsFunc(n.dump(ctx, "br-int"), func(f string) bool { return strings.Contains(f, "nw_dst=10.0.0.99") }) {
		t.Fatalf("br-int lacks the pipeline: %v", n.dump(ctx, "br-int"))
	}
	if a := countAborts(t, n.sb); a != 2 {
		t.Fatalf("vswitchd aborted %d times, want still 2", a)
	}
}

// startCrashing starts vswitchd, which the replay of a crashing flow may
// abort before it is ready: that start's error is not the test's.
func startCrashing(ctx context.Context, t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	if err := sb.StartVswitchd(ctx); err != nil && sb.VswitchdPID() != 0 {
		t.Fatal(err)
	}
}

func checkCrashingNamed(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Quarantined) != 1 || !strings.Contains(st.Quarantined[0].Error, "crashed ovs-vswitchd") ||
		!strings.Contains(st.Quarantined[0].Entry.Text, "in_port=9") {
		t.Fatalf("quarantined %+v, want the crashing learn flow of in_port=9", st.Quarantined)
	}
}

func countAborts(t *testing.T, sb *sandbox.Sandbox) int {
	t.Helper()
	b, err := os.ReadFile(sb.VswitchdLog())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "assertion len > 0 && len <= UINT16_MAX failed in ofpact_finish()")
}
