package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestBackupRestore: a backup taken while flowstated serves, restored as
// docs/operations.md says (stop, copy to --db, start), brings back the
// desired state as of the backup: the same store, so the bridge is claimed
// again, and the flows declared after the backup leave the switch.
func TestBackupRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	sb, srv, db := e.Sandbox, e.Config.Listen, e.Config.DBPath
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

	e.Stop()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	e.Start(ctx) // on the restored store
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
