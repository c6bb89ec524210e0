package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
)

// startFlowstated starts a sandbox with bridge br-int (ports p1, p2) and
// returns it with the Config of a flowstated managing br-int.
func startFlowstated(ctx context.Context, t *testing.T) (*sandbox.Sandbox, server.Config) {
	t.Helper()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	if err := sb.AddBridge(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"p1", "p2"} {
		if err := sb.AddPort(ctx, "br-int", p, i+1); err != nil {
			t.Fatal(err)
		}
	}
	bootID := filepath.Join(sb.Dir(), "boot_id")
	if err := os.WriteFile(bootID, []byte("b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return sb, server.Config{
		Listen: "unix://" + filepath.Join(sb.Dir(), "fs.sock"), DBPath: filepath.Join(sb.Dir(), "fs.db"), BootIDFile: bootID,
		RunDir: sb.RunDir(), OVSDB: sb.DBAddr(), Bridges: []string{"br-int"},
	}
}

// TestBackupRestore: a backup taken while flowstated serves, restored as
// docs/operations.md says (stop, copy to --db, start), brings back the
// desired state as of the backup: the same store, so the bridge is claimed
// again, and the flows declared after the backup leave the switch.
func TestBackupRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, cfg := startFlowstated(ctx, t)
	srv, db := cfg.Listen, cfg.DBPath
	d, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if d != nil {
			_ = d.Stop()
		}
	}()
	mustRun := func(stdin string, args ...string) string {
		t.Helper()
		out, err := run(ctx, t, srv, stdin, args...)
		if err != nil {
			t.Fatalf("flowctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	mustRun("", "wait")
	mustRun("table=0,priority=10,ip,actions=drop\n", "add-flows", "--module", "kept", "-")
	file := filepath.Join(t.TempDir(), "snap.db")
	if out := mustRun("", "backup", file); !strings.Contains(out, "bytes") {
		t.Fatalf("backup: %s", out)
	}
	if _, err := os.Stat(file + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("%s.tmp left behind: %v", file, err)
	}
	mustRun("table=0,priority=20,ip,actions=drop\n", "add-flows", "--module", "later", "-")

	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	d = nil
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if d, err = server.Start(ctx, cfg); err != nil {
		t.Fatalf("flowstated on the restored store: %v", err)
	}
	mustRun("", "wait")
	if out := mustRun("", "dump-flows"); out != "priority=10,ip actions=drop\n" {
		t.Fatalf("desired flows after the restore:\n%s", out)
	}
	flows, err := sb.DumpFlows(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 1 || !strings.Contains(flows[0], "priority=10,ip") {
		t.Fatalf("the switch after the restore: %q", flows)
	}
}
