package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestDumpFlows: a match filter as ovs-ofctl's, the module column, and the
// switch's counters of the flows a SYN went through.
func TestDumpFlows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	sb, srv := e.Sandbox, e.Config.Listen
	mustRun := func(stdin string, args ...string) string {
		t.Helper()
		out, err := run(ctx, t, srv, stdin, args...)
		if err != nil {
			t.Fatalf("flowctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	mustRun("", "wait")
	mustRun("table=0,priority=100,tcp,actions=resubmit(,1)\ntable=0,priority=90,arp,actions=normal\n", "add-flows", "--module", "pipeline", "-")
	mustRun("table=1,priority=100,tcp,tp_dst=80,actions=output:2\ntable=1,priority=90,ip,nw_dst=10.0.0.0/8,actions=drop\n", "add-flows", "--module", "policy", "-")

	for _, tc := range []struct{ args, want string }{
		{"tcp", "priority=100,tcp actions=resubmit(,1)\ntable=1, priority=100,tcp,tp_dst=80 actions=output:2\n"},
		{"table=1,ip", "table=1, priority=100,tcp,tp_dst=80 actions=output:2\ntable=1, priority=90,ip,nw_dst=10.0.0.0/8 actions=drop\n"},
		{"ip,nw_dst=10.1.0.0/16", ""},
		{"arp", "priority=90,arp actions=NORMAL\n"},
	} {
		if out := mustRun("", "dump-flows", tc.args); out != tc.want {
			t.Errorf("dump-flows %s:\n%s\nwant\n%s", tc.args, out, tc.want)
		}
	}
	out := mustRun("", "dump-flows", "--show-module", "--module", "policy", "tcp")
	if !regexp.MustCompile(`^MODULE +ENTRY\npolicy +table=1, priority=100,tcp,tp_dst=80 actions=output:2\n$`).MatchString(out) {
		t.Errorf("dump-flows --show-module --module policy tcp:\n%s", out)
	}
	if _, err := run(ctx, t, srv, "", "dump-flows", "tp_dst=80"); err == nil || !strings.Contains(err.Error(), "prerequisite") {
		t.Errorf("a filter without its prerequisite: %v", err)
	}

	// Completion asks flowstated for modules and bridges.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dump-flows", "--module", ""}, "pipeline\npolicy\n:4\n"},
		{[]string{"add-flows", "--module", "p"}, "pipeline\npolicy\n:4\n"},
		{[]string{"status", "--bridge", ""}, "br-int\n:4\n"},
		{[]string{"status", "-o", ""}, "text\njson\n:4\n"},
	} {
		stdout, stderr, code := flowctl(ctx, "", append([]string{"__complete", "--server", srv}, tc.args...)...)
		if code != 0 || stdout != tc.want {
			t.Errorf("completing %q: exit %d\n%s%s", tc.args, code, stdout, stderr)
		}
	}

	// Counters: the SYN goes through table 0's tcp flow and table 1's
	// tp_dst=80 flow; they reach OpenFlow when the revalidator runs.
	if err := sb.InjectSYN(ctx, "br-int", "br-int-p1", sandbox.Packet{}); err != nil {
		t.Fatal(err)
	}
	counted := regexp.MustCompile(`(?m)^duration=[0-9.]+s, n_packets=1, n_bytes=\d+, table=1, priority=100,tcp,tp_dst=80 actions=output:2$`)
	testenv.Poll(ctx, t, "the SYN counted", func() (bool, error) {
		out = mustRun("", "dump-flows", "--stats", "table=1")
		return counted.MatchString(out), nil
	})
	if !strings.Contains(out, "n_packets=0, n_bytes=0, table=1, priority=90,ip,nw_dst=10.0.0.0/8 actions=drop") || strings.Count(out, "\n") != 2 {
		t.Fatalf("dump-flows --stats table=1:\n%s", out)
	}
	// A desired flow the switch lacks (deleted behind flowstate's back).
	if out, err := sb.Ofctl(ctx, "del-flows", "br-int", "arp"); err != nil {
		t.Fatal(err, out)
	}
	if out := mustRun("", "dump-flows", "--stats", "arp"); out != "NOT ON SWITCH, priority=90,arp actions=NORMAL\n" {
		t.Fatalf("dump-flows --stats arp after deleting it on the switch:\n%s", out)
	}
}
