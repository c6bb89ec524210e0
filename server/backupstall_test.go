package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/server"
)

// TestBackupWriterRule: with --module-writer rules, a peer that may write
// no module is refused a Backup (flowctl run as uid 65533), a writer (uid
// 65534) gets one.
func TestBackupWriterRule(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a client as another uid needs root; this test runs in CI, which runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const nobody = 65534
	writers := server.Writers{}
	if err := writers.ParseWriter("pod=uid:65534"); err != nil {
		t.Fatal(err)
	}
	e := newEnv(ctx, t, func(c *server.Config) { c.Writers = writers })
	e.Start(ctx)
	e.WaitConverged(ctx)
	flowctlAs, dir := flowctlAsPeer(ctx, t, e)
	backupAs := func(uid uint32) (string, error) {
		return flowctlAs(uid, "", "backup", filepath.Join(dir, fmt.Sprintf("b%d.db", uid)))
	}
	out, err := backupAs(nobody - 1)
	if err == nil || !strings.Contains(out, "may write no module, so may not take a backup of the store") {
		t.Fatalf("a backup by a peer that may write nothing: %v\n%s", err, out)
	}
	if out, err := backupAs(nobody); err != nil || !strings.Contains(out, "bytes") {
		t.Fatalf("a backup by a writer: %v\n%s", err, out)
	}
}

// TestBackupStalled (must-show 6): a writer that opens a Backup and stops
// reading holds no store transaction: 80 writes of a module go on, each
// applied, the store file stays bounded and the engine is never wedged; the
// stalled stream, once read, is a whole store. Whether a peer may take a
// backup at all is TestBackupWriterRule's.
func TestBackupStalled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEnv(ctx, t)
	e.Start(ctx)
	e.WaitConverged(ctx)

	// A writer's backup, stalled after its first message.
	stream, err := e.rawAPI(ctx).Backup(ctx, &flowstatev1.BackupRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	db := e.Config.DBPath
	size := func() int64 {
		fi, err := os.Stat(db)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	// Small writes: this test shows the writes go on and the engine is
	// not wedged; store.TestBackupStalledReader measures the file against
	// a held read transaction with large ones.
	const flows, writes = 500, 80
	es := make([]client.Entry, flows)
	sync := func(i int) time.Duration {
		for j := range es {
			es[j] = client.FlowText(fmt.Sprintf("table=2,priority=10,ip,nw_dst=10.2.%d.%d,actions=mod_nw_tos:%d,output:2", j>>8, j&255, 4*(i%60)))
		}
		start := time.Now()
		res, err := e.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "pod"}, false, es...)
		if err != nil {
			t.Fatalf("write %d with a stalled backup: %v", i, err)
		}
		if !res.Applied {
			t.Fatalf("write %d not applied", i)
		}
		return time.Since(start)
	}
	sync(0)
	before := size()
	var slowest, total time.Duration
	for i := range writes {
		d := sync(1 + i)
		slowest, total = max(slowest, d), total+d
	}
	after := size()
	t.Logf("stalled backup: %d writes of a %d-flow module, %v on average, the slowest %v; store file %.1f MiB before, %.1f MiB after",
		writes, flows, (total / writes).Round(time.Millisecond), slowest.Round(time.Millisecond), float64(before)/(1<<20), float64(after)/(1<<20))
	if slowest > 20*time.Second {
		t.Errorf("a write took %v behind a stalled backup", slowest)
	}
	// bbolt grows the file in steps of up to 16 MiB: one step at most, where
	// a held read transaction would add every write's pages.
	if after > before+16<<20 {
		t.Errorf("the store file grew from %d to %d bytes behind a stalled backup", before, after)
	}
	st, err := e.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Wedged != "" {
		t.Errorf("wedged with a stalled backup: %s", st.Wedged)
	}
	n := len(first.GetData())
	for {
		m, err := stream.Recv()
		if err != nil {
			break
		}
		n += len(m.GetData())
	}
	if n < 64<<10 {
		t.Errorf("the stalled backup, read at last, held %d bytes", n)
	}
}
