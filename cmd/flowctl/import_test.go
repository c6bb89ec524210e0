package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// bridgeState is a bridge's flows and groups as ovs-ofctl prints them,
// without counters.
func bridgeState(ctx context.Context, t *testing.T, sb *sandbox.Sandbox) []string {
	t.Helper()
	flows, err := sb.DumpFlows(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	groups, err := sb.DumpGroups(ctx, "br-int")
	if err != nil {
		t.Fatal(err)
	}
	return append(flows, groups...)
}

// TestImport: a controller that programmed br-int itself hands its flows to
// module legacy while flowstated stands aside from the bridge; the import
// takes the flows of the owned cookie space and the group they use, leaves
// out another controller's flows and a learned flow with a timeout, is all or
// nothing (a line it cannot parse, an identity another module owns), can be
// repeated from a dump-flows file, and once the bridge is adopted nothing on
// the switch changes: no gap.
func TestImport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) {
		c.OwnedCookie = entry.CookieSpace{Value: 0x1000, Mask: 0xf000}
	}))
	sb, cfg, c := e.Sandbox, e.Config, e.Client
	if out, err := sb.Ofctl(ctx, "add-group", "br-int", "group_id=7,type=all,bucket=output:2"); err != nil {
		t.Fatal(err, out)
	}
	for _, f := range []string{
		"cookie=0x1000,table=0,priority=100,ip,actions=group:7",
		"cookie=0x1001,table=1,priority=50,tcp,actions=drop",
		"cookie=0x2000,table=0,priority=90,arp,actions=NORMAL",               // another controller's
		"cookie=0x1002,table=0,priority=40,idle_timeout=60,udp,actions=drop", // learned: not desired state
	} {
		if out, err := sb.Ofctl(ctx, "add-flow", "br-int", f); err != nil {
			t.Fatal(err, out)
		}
	}
	before := bridgeState(ctx, t, sb)
	e.Start(ctx)
	var reason string
	defer func() {
		if t.Failed() {
			t.Logf("last reason: %q", reason)
		}
	}()
	testenv.Poll(ctx, t, "flowstated stands aside from br-int", func() (bool, error) {
		st, err := c.Status(ctx)
		if err != nil || len(st.Bridges) == 0 {
			return false, nil
		}
		reason = st.Bridges[0].Reason
		return strings.Contains(reason, "stands aside"), nil
	})
	flowctl := func(stdin string, args ...string) (string, error) {
		return run(ctx, t, cfg.Listen, stdin, args...)
	}
	moduleFlows := func(module string) []string {
		t.Helper()
		out, err := flowctl("", "dump-flows", "--module", module)
		if err != nil && strings.Contains(err.Error(), `module "`+module+`" declares nothing`) {
			return nil // a module flowstated does not know
		}
		if err != nil {
			t.Fatal(err, out)
		}
		return strings.Fields(out)
	}

	out, err := flowctl("", "import", "--module", "legacy", "--ovs-rundir", sb.RunDir())
	if err != nil || !strings.Contains(out, "imported 2 flows, 1 groups, 0 meters into module legacy (left out: 2 outside the owned cookie space, 1 with timeouts)") {
		t.Fatalf("import from the bridge: %v\n%s", err, out)
	}
	if !strings.Contains(out, "stands aside") {
		t.Fatalf("import does not say the bridge stands aside: %s", out)
	}
	imported := moduleFlows("legacy")

	dump, err := sb.Ofctl(ctx, "dump-flows", "br-int")
	if err != nil {
		t.Fatal(err, dump)
	}
	file := filepath.Join(t.TempDir(), "dump.txt")
	if err := os.WriteFile(file, []byte(dump), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := flowctl("", "import", "--module", "legacy", file); err != nil || !strings.Contains(out, "imported 2 flows") {
		t.Fatalf("import of the same flows from a dump-flows file: %v\n%s", err, out)
	}
	if got := moduleFlows("legacy"); !slices.Equal(got, imported) {
		t.Fatalf("a repeated import changed the module:\n%v\nwant\n%v", got, imported)
	}
	if out, err := flowctl("", "import", "--module", "other", file); err == nil || !strings.Contains(out+err.Error(), `owned by module "legacy"`) {
		t.Fatalf("import of flows another module owns: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	if err := os.WriteFile(bad, []byte("cookie=0x1003,priority=5,ip,actions=output:1\ncookie=0x1004,priority=6,ip,actions=bogus\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := flowctl("", "import", "--module", "other", bad); err == nil || !strings.Contains(err.Error(), "bad.txt:2") {
		t.Fatalf("import of a file with a bad line: %v\n%s", err, out)
	}
	if got := moduleFlows("other"); len(got) != 0 {
		t.Fatalf("a refused import stored %v", got)
	}

	m := regexp.MustCompile(`external_ids:flowstate-store=([0-9a-f-]+)`).FindStringSubmatch(reason)
	if m == nil {
		t.Fatalf("reason gives no adoption command: %s", reason)
	}
	if out, err := sb.Vsctl(ctx, "set", "Bridge", "br-int", "external_ids:flowstate-store="+m[1]); err != nil {
		t.Fatal(err, out)
	}
	if out, err := flowctl("", "wait", "--converged"); err != nil {
		t.Fatalf("adopted bridge does not converge: %v\n%s", err, out)
	}
	if got := bridgeState(ctx, t, sb); !slices.Equal(got, before) {
		t.Fatalf("adopting the imported bridge changed the switch:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(before, "\n"))
	}
	if out, err := flowctl("", "diff"); err != nil {
		t.Fatalf("diff after the import: %v\n%s", err, out)
	}
}

// TestImportNotState: flows of the owned cookie space that cannot be
// desired state (send_flow_rem on the bridge; check_overlap, reset_counts,
// a timeout in a file) are left out and named, and the rest is imported, a
// flag flowstated keeps (no_packet_counts) included.
func TestImportNotState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) {
		c.OwnedCookie = entry.CookieSpace{Value: 0x1000, Mask: 0xf000}
	}))
	sb, cfg, c := e.Sandbox, e.Config, e.Client
	for _, f := range []string{
		"cookie=0x1000,table=0,priority=100,ip,actions=drop",
		"cookie=0x1001,table=0,priority=90,send_flow_rem,arp,actions=NORMAL",
		"cookie=0x1002,table=0,priority=80,send_flow_rem,tcp,actions=drop",
		"cookie=0x1003,table=0,priority=70,no_packet_counts,udp,actions=drop",
	} {
		if out, err := sb.Ofctl(ctx, "add-flow", "br-int", f); err != nil {
			t.Fatal(err, out)
		}
	}
	e.Start(ctx)
	var reason string
	testenv.Poll(ctx, t, "flowstated stands aside from br-int", func() (bool, error) {
		st, err := c.Status(ctx)
		if err != nil || len(st.Bridges) == 0 {
			return false, nil
		}
		reason = st.Bridges[0].Reason
		return strings.Contains(reason, "stands aside"), nil
	})
	flowctl := func(args ...string) (string, error) {
		return run(ctx, t, cfg.Listen, "", args...)
	}
	// named reports whether out names, on one line, a flow with each of want.
	named := func(out string, want ...string) bool {
		for _, l := range strings.Split(out, "\n") {
			if !strings.HasPrefix(l, "  ") {
				continue
			}
			all := true
			for _, w := range want {
				all = all && strings.Contains(l, w)
			}
			if all {
				return true
			}
		}
		return false
	}

	out, err := flowctl("import", "--module", "legacy", "--ovs-rundir", sb.RunDir())
	if err != nil || !strings.Contains(out, "imported 2 flows, 0 groups, 0 meters into module legacy (left out: 1 outside the owned cookie space, 2 with send_flow_rem)") ||
		!strings.Contains(out, "left out, 2 with send_flow_rem: send_flow_rem: flow-removed messages") ||
		!named(out, "priority=90", "arp", "send_flow_rem") || !named(out, "priority=80", "tcp", "send_flow_rem") ||
		!strings.Contains(out, "declare them without send_flow_rem") {
		t.Fatalf("import from the bridge: %v\n%s", err, out)
	}
	if out, err := flowctl("dump-flows", "--module", "legacy"); err != nil ||
		!strings.Contains(out, "priority=100,ip actions=drop") || !strings.Contains(out, "no_packet_counts") || strings.Count(out, "actions=") != 2 {
		t.Fatalf("module legacy after the import: %v\n%s", err, out)
	}

	file := filepath.Join(t.TempDir(), "flows.txt")
	if err := os.WriteFile(file, []byte(strings.Join([]string{
		"cookie=0x1010,table=1,priority=5,ip,actions=drop",
		"cookie=0x1011,table=1,priority=6,check_overlap,ip,actions=drop",
		"cookie=0x1012,table=1,priority=7,reset_counts,ip,actions=drop",
		"cookie=0x1013,table=1,priority=8,hard_timeout=30,ip,actions=drop",
		"cookie=0x1014,table=1,priority=9,send_flow_rem,ip,actions=drop",
		"cookie=0x2000,table=1,priority=10,ip,actions=drop",
	}, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = flowctl("import", "--module", "other", file)
	if err != nil || !strings.Contains(out, "imported 1 flows, 0 groups, 0 meters into module other "+
		"(left out: 1 outside the owned cookie space, 1 with check_overlap, 1 with reset_counts, 1 with timeouts, 1 with send_flow_rem)") ||
		!named(out, "flows.txt:2: ", "check_overlap") || !named(out, "flows.txt:3: ", "reset_counts") ||
		!named(out, "flows.txt:4: ", "hard_timeout=30") || !named(out, "flows.txt:5: ", "send_flow_rem") ||
		named(out, "cookie=0x2000") {
		t.Fatalf("import from a file: %v\n%s", err, out)
	}

	// Adopted, the bridge loses the send_flow_rem flows nobody declared,
	// as the import warned, and keeps the rest.
	m := regexp.MustCompile(`external_ids:flowstate-store=([0-9a-f-]+)`).FindStringSubmatch(reason)
	if m == nil {
		t.Fatalf("reason gives no adoption command: %s", reason)
	}
	if out, err := sb.Vsctl(ctx, "set", "Bridge", "br-int", "external_ids:flowstate-store="+m[1]); err != nil {
		t.Fatal(err, out)
	}
	// A bridge standing aside is excused, so wait --converged alone may
	// answer before flowstated has seen the adoption: wait for its replay
	// to take the undeclared flows off, bounded by ctx.
	var flows string
	for {
		flows = strings.Join(bridgeState(ctx, t, sb), "\n")
		if !strings.Contains(flows, "send_flow_rem") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("br-int still holds the send_flow_rem flows after the adoption:\n%s", flows)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if out, err := flowctl("wait", "--converged"); err != nil {
		t.Fatalf("adopted bridge does not converge: %v\n%s", err, out)
	}
	flows = strings.Join(bridgeState(ctx, t, sb), "\n")
	if strings.Contains(flows, "send_flow_rem") || !strings.Contains(flows, "cookie=0x1000,") || !strings.Contains(flows, "cookie=0x1003,") {
		t.Fatalf("br-int after the adoption:\n%s", flows)
	}

	// Nothing left to import: the error still names what was left out.
	only := filepath.Join(t.TempDir(), "only.txt")
	if err := os.WriteFile(only, []byte("cookie=0x1020,table=2,priority=5,send_flow_rem,ip,actions=drop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = flowctl("import", "--module", "third", only)
	if err == nil || !strings.Contains(err.Error(), "no flows to import") || !strings.Contains(err.Error(), "1 with send_flow_rem") ||
		!named(out, "only.txt:1: ", "send_flow_rem") {
		t.Fatalf("import of only a send_flow_rem flow: %v\n%s", err, out)
	}
}

// TestImportNotStateBinary is TestImportNotState's import from the bridge
// against the flowstated binary: a send_flow_rem flow is left out and
// named, and the rest imported.
func TestImportNotStateBinary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "flowstated")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../flowstated").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	e := testenv.New(ctx, t)
	sb := e.Sandbox
	for _, f := range []string{
		"cookie=0x1000,table=0,priority=100,ip,actions=drop",
		"cookie=0x1001,table=0,priority=90,send_flow_rem,arp,actions=NORMAL",
	} {
		if out, err := sb.Ofctl(ctx, "add-flow", "br-int", f); err != nil {
			t.Fatal(err, out)
		}
	}
	fs := exec.Command(bin, "--ovs-rundir", sb.RunDir(), "--ovsdb", sb.DBAddr(), "--bridge", "br-int",
		"--db", e.Config.DBPath, "--listen", e.Config.Listen, "--boot-id-file", e.Config.BootIDFile,
		"--metrics-listen", "", "--guard", "off", "--owned-cookie", "0x1000/0xf000")
	logs := &lockedBuffer{}
	fs.Stderr = logs
	if err := fs.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = fs.Process.Kill()
		_ = fs.Wait()
		if t.Failed() {
			t.Logf("flowstated log:\n%s", logs.String())
		}
	}()
	testenv.Poll(ctx, t, "flowstated stands aside from br-int", func() (bool, error) {
		st, err := e.Client.Status(ctx)
		return err == nil && len(st.Bridges) > 0 && strings.Contains(st.Bridges[0].Reason, "stands aside"), nil
	})
	out, err := run(ctx, t, e.Config.Listen, "", "import", "--module", "legacy", "--ovs-rundir", sb.RunDir())
	if err != nil || !strings.Contains(out, "imported 1 flows, 0 groups, 0 meters into module legacy (left out: 1 outside the owned cookie space, 1 with send_flow_rem)") ||
		!strings.Contains(out, "  cookie=0x1001, send_flow_rem priority=90,arp actions=NORMAL\n") {
		t.Fatalf("import: %v\n%s", err, out)
	}
	if out, err := run(ctx, t, e.Config.Listen, "", "dump-flows", "--module", "legacy"); err != nil ||
		!strings.Contains(out, "priority=100,ip actions=drop") || strings.Count(out, "actions=") != 1 {
		t.Fatalf("module legacy after the import: %v\n%s", err, out)
	}
}
