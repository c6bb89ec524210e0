package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestDiffBothSides: a flow changed behind flowstate's back is shown as the
// switch holds it and as desired, with few flows on the switch and with more
// than a dump keeps whole; replace-flows --dry-run and diff --file say what
// the replace does, and do nothing.
func TestDiffBothSides(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	sb, srv := e.Sandbox, e.Config.Listen
	run := func(code int, stdin string, args ...string) (string, string) {
		t.Helper()
		stdout, stderr, got := flowctl(ctx, stdin, append([]string{"--server", srv}, args...)...)
		if got != code {
			t.Fatalf("flowctl %q: exit %d, want %d\n%s%s", args, got, code, stdout, stderr)
		}
		return stdout, stderr
	}
	run(0, "table=0,priority=100,ip,actions=resubmit(,1)\ntable=1,priority=90,ip,actions=normal\n", "add-flows", "--module", "pipeline", "-")
	run(0, "", "wait")

	changed := func(what string) {
		t.Helper()
		if out, err := sb.Ofctl(ctx, "mod-flows", "--strict", "br-int", "table=1,priority=90,ip,actions=drop"); err != nil {
			t.Fatal(err, out)
		}
		stdout, stderr := run(2, "", "diff")
		if stdout != "- table=1, priority=90,ip actions=drop\n+ table=1, priority=90,ip actions=NORMAL\n" ||
			!strings.Contains(stderr, "1 differences: 0 to add, 1 to change, 0 to delete") {
			t.Fatalf("diff %s:\n%s%s", what, stdout, stderr)
		}
		stdout, _ = run(2, "", "diff", "-o", "json")
		var c jsonChange
		if err := json.Unmarshal([]byte(stdout), &c); err != nil || c != (jsonChange{Op: "modify", Kind: "flow", Module: "pipeline",
			Desired: "table=1, priority=90,ip actions=NORMAL", Actual: "table=1, priority=90,ip actions=drop"}) {
			t.Fatalf("diff -o json %s: %v\n%s", what, err, stdout)
		}
		run(0, "", "reconcile")
		if stdout, _ := run(0, "", "diff"); stdout != "" {
			t.Fatalf("diff after reconcile:\n%s", stdout)
		}
	}
	changed("with 2 flows")
	// Past keepFlows the dump keeps hashes (of the flows after the first
	// 4096 dumped: table 1's comes after table 0's): the switch's version is
	// read again.
	var many strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&many, "table=0,priority=1000,tcp,tp_dst=%d,actions=drop\n", i+1)
	}
	run(0, many.String(), "add-flows", "--module", "bulk", "-")
	run(0, "", "wait")
	changed("with 5002 flows")

	t.Run("replace-flows --dry-run and diff --file", func(t *testing.T) {
		before, _ := run(0, "", "dump-flows", "--module", "pipeline")
		next := "table=0,priority=100,ip,actions=resubmit(,2)\ntable=2,priority=1,actions=drop\n"
		stdout, _ := run(0, next, "replace-flows", "--module", "pipeline", "--dry-run", "-")
		want := "- priority=100,ip actions=resubmit(,1)\n+ priority=100,ip actions=resubmit(,2)\n+ table=2, priority=1 actions=drop\n" +
			"- table=1, priority=90,ip actions=NORMAL\npipeline: 2 flows: 1 added, 1 changed, 1 removed, 0 unchanged (dry run: nothing changed)\n"
		if stdout != want {
			t.Fatalf("replace-flows --dry-run:\n%s\nwant\n%s", stdout, want)
		}
		stdout, stderr := run(2, next, "diff", "--module", "pipeline", "--file", "-")
		if !strings.HasSuffix(want, stdout+"pipeline: 2 flows: 1 added, 1 changed, 1 removed, 0 unchanged (dry run: nothing changed)\n") ||
			!strings.Contains(stderr, "(dry run: nothing changed)") {
			t.Fatalf("diff --file:\n%s%s", stdout, stderr)
		}
		stdout, _ = run(0, next, "replace-flows", "--module", "pipeline", "--dry-run", "-o", "json", "-")
		for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
			var c jsonChange
			if err := json.Unmarshal([]byte(l), &c); err != nil || c.Module != "pipeline" {
				t.Fatalf("--dry-run -o json line %q: %v", l, err)
			}
		}
		if after, _ := run(0, "", "dump-flows", "--module", "pipeline"); after != before {
			t.Fatalf("a dry run changed the module:\n%s\nwas\n%s", after, before)
		}
		// The real replace does what the dry run said.
		stdout, _ = run(0, next, "replace-flows", "--module", "pipeline", "-")
		if !strings.Contains(stdout, "pipeline: 2 flows: 1 added, 1 changed, 1 removed, 0 unchanged") {
			t.Fatalf("replace-flows after the dry run:\n%s", stdout)
		}
		if stdout, _ := run(0, next, "diff", "--module", "pipeline", "--file", "-"); stdout != "" {
			t.Fatalf("diff --file of the module's own set:\n%s", stdout)
		}
		// What would fail is said, not done.
		_, stderr = run(1, "table=0,priority=1000,tcp,tp_dst=7,actions=normal\ntable=9,priority=1,actions=drop\ntable=9,priority=1,actions=normal\n",
			"replace-flows", "--module", "pipeline", "--dry-run", "-")
		if !strings.Contains(stderr, "replace-flows of - would fail, changing nothing") || !strings.Contains(stderr, `-:1: "table=0,priority=1000,tcp,tp_dst=7,actions=normal" is module "bulk"'s`) ||
			!strings.Contains(stderr, "-:3: the same flow (table, priority, match) as line 2") {
			t.Fatalf("a dry run that would fail:\n%s", stderr)
		}
	})
}
