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

// TestStrictDeleteAbsent: as ovs-ofctl del-flows --strict, deleting a flow
// the module does not hold does nothing and says nothing (exit 0); in a file
// with flows it holds, those are deleted; a flow of another module is still
// refused.
func TestStrictDeleteAbsent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	srv := e.Config.Listen
	fc := func(want int, args ...string) (string, string) {
		t.Helper()
		stdout, stderr, code := flowctl(ctx, "", append([]string{"--server", srv}, args...)...)
		if code != want {
			t.Fatalf("flowctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, stdout, stderr)
		}
		return stdout, stderr
	}
	fc(0, "add-flow", "--module", "pipeline", "table=0,priority=100,ip,actions=drop")
	fc(0, "add-flow", "--module", "pipeline", "table=0,priority=90,arp,actions=normal")
	fc(0, "add-flow", "--module", "policy", "table=0,priority=80,tcp,actions=drop")

	if stdout, stderr := fc(0, "del-flows", "--module", "pipeline", "--strict", "priority=77,ip"); stdout != "" || stderr != "" {
		t.Errorf("strict delete of an absent flow printed:\n%s%s", stdout, stderr)
	}
	file := filepath.Join(e.Sandbox.Dir(), "del.txt")
	if err := os.WriteFile(file, []byte("priority=77,ip\ntable=0,priority=90,arp\npriority=78,ip\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if stdout, _ := fc(0, "del-flows", "--module", "pipeline", "--strict", file); stdout != "1 flows deleted\n" {
		t.Errorf("strict delete of one present and two absent flows: %q", stdout)
	}
	if _, stderr := fc(1, "del-flows", "--module", "pipeline", "--strict", "table=0,priority=80,tcp"); !strings.Contains(stderr, "policy") {
		t.Errorf("strict delete of another module's flow: %s", stderr)
	}
	// "-": the lines of standard input, not a bridge named "-".
	if stdout, stderr, code := flowctl(ctx, "table=0,priority=100,ip\npriority=79,ip\n", "--server", srv, "del-flows", "--module", "pipeline", "--strict", "-"); code != 0 || stdout != "1 flows deleted\n" {
		t.Errorf("strict delete from stdin: exit %d\n%s%s", code, stdout, stderr)
	}
	out, _ := fc(0, "dump-flows")
	if strings.Contains(out, "arp") || strings.Contains(out, "priority=100,ip") || !strings.Contains(out, "priority=80,tcp") {
		t.Errorf("dump-flows after the deletes:\n%s", out)
	}
}

// TestBadFlowExitStatus: a flow that does not parse is bad input, exit
// status 2, whether given inline, in a FILE or on standard input.
func TestBadFlowExitStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	srv := e.Config.Listen
	bad := "table=0,nw_srcc=1.2.3.4,actions=drop"
	file := filepath.Join(e.Sandbox.Dir(), "bad.flows")
	if err := os.WriteFile(file, []byte("table=0,priority=1,actions=drop\n"+bad+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"add-flow", "--module", "m", bad}},
		{"", []string{"add-flows", "--module", "m", file}},
		{"", []string{"replace-flows", "--module", "m", file}},
		{bad + "\n", []string{"add-flows", "--module", "m", "-"}},
	} {
		_, stderr, code := flowctl(ctx, tc.stdin, append([]string{"--server", srv}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, "nw_srcc") {
			t.Errorf("flowctl %s: exit %d, want 2\n%s", strings.Join(tc.args, " "), code, stderr)
		}
	}
}
