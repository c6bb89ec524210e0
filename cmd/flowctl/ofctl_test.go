package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestOfctlUser: what an ovs-ofctl user types works, or says what to type.
func TestOfctlUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := testenv.New(ctx, t)
	e.Start(ctx)
	sb, srv := e.Sandbox, e.Config.Listen
	ok := func(stdin string, args ...string) string {
		t.Helper()
		stdout, stderr, code := flowctl(ctx, stdin, append([]string{"--server", srv}, args...)...)
		if code != 0 {
			t.Fatalf("flowctl %q: exit %d\n%s%s", args, code, stdout, stderr)
		}
		return stdout
	}
	fails := func(code int, stdin string, args ...string) string {
		t.Helper()
		stdout, stderr, got := flowctl(ctx, stdin, append([]string{"--server", srv}, args...)...)
		if got != code {
			t.Fatalf("flowctl %q: exit %d, want %d\n%s%s", args, got, code, stdout, stderr)
		}
		if strings.Count(stderr, "see 'flowctl --help'") > 1 {
			t.Fatalf("flowctl %q: the hint twice:\n%s", args, stderr)
		}
		return stderr
	}
	ok("", "wait")

	t.Run("inline flows and -", func(t *testing.T) {
		if out := ok("", "add-flow", "--module", "pipeline", "table=0,priority=100,ip,actions=resubmit(,1)"); out != "1 flow applied\n" {
			t.Fatalf("add-flow: %q", out)
		}
		ok("table=0,priority=200,ip,nw_src=10.0.0.1,actions=drop\ntable=0,priority=5,actions=normal\n", "add-flow", "--module", "pipeline", "-")
		// add-flows takes FILE or -: a flow where FILE goes says what to do.
		stderr := fails(2, "", "add-flows", "--module", "pipeline", "table=0,priority=1,actions=drop")
		if !strings.Contains(stderr, "no such file: FILE or - (standard input) expected; for one entry inline, as ovs-ofctl's add-flow, use: flowctl add-flow --module M 'table=0,priority=1,actions=drop'") {
			t.Fatalf("add-flows of a flow:\n%s", stderr)
		}
		stderr = fails(2, "", "add-flow", "--module", "pipeline", "table=0,nw_srcc=1.2.3.4,actions=drop")
		if !strings.Contains(stderr, `flow "table=0,nw_srcc=1.2.3.4,actions=drop"`) || !strings.Contains(stderr, "nw_srcc") {
			t.Fatalf("add-flow with a typo:\n%s", stderr)
		}
		ok("", "add-flow", "--module", "policy", "table=1,priority=90,ip,actions=normal")
		ok("", "add-flow", "--module", "policy", "table=1,priority=300,tcp,actions=drop")
		ok("", "add-flow", "--module", "policy", "table=1,priority=10,actions=drop")
	})

	t.Run("dump order is ovs-ofctl's", func(t *testing.T) {
		ok("", "wait")
		out := ok("", "dump-flows")
		want := "priority=200,ip,nw_src=10.0.0.1 actions=drop\npriority=100,ip actions=resubmit(,1)\npriority=5 actions=NORMAL\n" +
			"table=1, priority=300,tcp actions=drop\ntable=1, priority=90,ip actions=NORMAL\ntable=1, priority=10 actions=drop\n"
		if out != want {
			t.Fatalf("dump-flows:\n%s\nwant\n%s", out, want)
		}
		// Table by table, the priorities come as ovs-ofctl --rsort prints them.
		prio := regexp.MustCompile(`priority=(\d+)`)
		for table := range 2 {
			sw, err := sb.Ofctl(ctx, "--rsort", "dump-flows", "br-int", fmt.Sprintf("table=%d", table))
			if err != nil {
				t.Fatal(err, sw)
			}
			mine := ok("", "dump-flows", fmt.Sprintf("table=%d", table))
			var a, b []string
			for _, m := range prio.FindAllStringSubmatch(sw, -1) {
				a = append(a, m[1])
			}
			for _, m := range prio.FindAllStringSubmatch(mine, -1) {
				b = append(b, m[1])
			}
			if !slices.Equal(a, b) || len(a) != 3 {
				t.Errorf("table %d: ovs-ofctl --rsort priorities %v, flowctl %v", table, a, b)
			}
		}
	})

	t.Run("positional bridge, unknown module, -o json", func(t *testing.T) {
		if out := ok("", "dump-flows", "br-int", "tcp"); out != "table=1, priority=300,tcp actions=drop\n" {
			t.Fatalf("dump-flows br-int tcp: %q", out)
		}
		if out := ok("", "dump-flows", "br-int"); strings.Count(out, "\n") != 6 {
			t.Fatalf("dump-flows br-int:\n%s", out)
		}
		stderr := fails(1, "", "dump-flows", "br-nope")
		if !strings.Contains(stderr, `bridge "br-nope" is not managed by flowstated (it manages br-int)`) {
			t.Fatalf("dump-flows br-nope:\n%s", stderr)
		}
		stderr = fails(1, "", "dump-flows", "--module", "nosuch")
		if !strings.Contains(stderr, `module "nosuch" declares nothing on bridge br-int (its modules: pipeline, policy)`) {
			t.Fatalf("dump-flows --module nosuch:\n%s", stderr)
		}
		out := ok("", "dump-flows", "--stats", "-o", "json")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 6 {
			t.Fatalf("dump-flows -o json: %d lines\n%s", len(lines), out)
		}
		var first struct {
			Bridge, Module, Kind, Entry string
			Table, Priority             *int
			OnSwitch                    *bool
			NPackets                    *uint64
		}
		if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
			t.Fatalf("%v: %s", err, lines[0])
		}
		if first.Bridge != "br-int" || first.Module != "pipeline" || first.Kind != "flow" || first.Table == nil || *first.Table != 0 ||
			first.Priority == nil || *first.Priority != 200 || first.Entry != "priority=200,ip,nw_src=10.0.0.1 actions=drop" ||
			first.OnSwitch == nil || !*first.OnSwitch || first.NPackets == nil {
			t.Fatalf("dump-flows --stats -o json, first line: %s", lines[0])
		}
	})

	t.Run("non-strict del-flows deletes the module's flows only", func(t *testing.T) {
		ok("table=2,priority=10,ip,actions=drop\ntable=2,priority=20,tcp,actions=drop\ntable=2,priority=30,arp,actions=drop\n"+
			"table=3,cookie=0x1234,priority=1,ip,actions=drop\n", "add-flows", "--module", "victim", "-")
		ok("table=2,priority=40,ip,nw_dst=10.0.0.0/8,actions=drop\n", "add-flows", "--module", "bystander", "-")
		// ip covers tcp too; the bystander's ip flow stays.
		if out := ok("", "del-flows", "--module", "victim", "br-int", "table=2,ip"); out != "2 flows of module victim deleted (of 4)\n" {
			t.Fatalf("del-flows table=2,ip: %q", out)
		}
		if out := ok("", "dump-flows", "table=2"); out != "table=2, priority=40,ip,nw_dst=10.0.0.0/8 actions=drop\ntable=2, priority=30,arp actions=drop\n" {
			t.Fatalf("after del-flows table=2,ip:\n%s", out)
		}
		stderr := fails(2, "", "del-flows", "--module", "victim", "table=2,priority=30,arp")
		if !strings.Contains(stderr, "priority") || !strings.Contains(stderr, "give --strict") {
			t.Fatalf("non-strict with a priority:\n%s", stderr)
		}
		if out := ok("", "del-flows", "--module", "victim", "cookie=0x34/0xff"); out != "1 flows of module victim deleted (of 2)\n" {
			t.Fatalf("del-flows cookie=0x34/0xff: %q", out)
		}
		if out := ok("", "del-flows", "--module", "victim", "--strict", "table=2,priority=30,arp"); out != "1 flows deleted\n" {
			t.Fatalf("del-flows --strict: %q", out)
		}
		ok("table=2,priority=30,arp,actions=drop\ntable=2,priority=31,arp,actions=output:2\n", "add-flows", "--module", "victim", "-")
		if out := ok("", "del-flows", "--module", "victim", "out_port=2"); out != "1 flows of module victim deleted (of 2)\n" {
			t.Fatalf("del-flows out_port=2: %q", out)
		}
		if out := ok("", "del-flows", "--module", "victim"); out != "1 flows of module victim deleted (of 1)\n" {
			t.Fatalf("del-flows of a whole module: %q", out)
		}
		if out := ok("", "dump-flows", "table=2"); out != "table=2, priority=40,ip,nw_dst=10.0.0.0/8 actions=drop\n" {
			t.Fatalf("the bystander's flow:\n%s", out)
		}
		ok("", "wait")
		if flows, err := sb.DumpFlows(ctx, "br-int"); err != nil || slices.ContainsFunc(flows, func(f string) bool { return strings.Contains(f, "table=3") }) {
			t.Fatalf("the switch after del-flows: %v\n%s", err, strings.Join(flows, "\n"))
		}
	})

	t.Run("3 a.m. mistakes", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"stauts"}, `unknown command "stauts" (did you mean "status"?)`},
			{[]string{"add-flw", "--module", "m", "f"}, `unknown command "add-flw" (did you mean "add-flow" or "add-flows"?)`},
			{[]string{"--timeout", "5s", "dump-flowz", "--module", "m"}, `unknown command "dump-flowz" (did you mean "dump-flows"?)`},
			{[]string{"--timeout", "5x", "status"}, `invalid argument "5x" for "--timeout" flag: want a duration (30s, 2m) or seconds (30)`},
		} {
			_, stderr, code := flowctl(ctx, "", tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "flowctl --help") != 1 {
				t.Errorf("flowctl %q: exit %d, want 2 and %q once with one hint:\n%s", tc.args, code, tc.want, stderr)
			}
		}
		if out := ok("", "--timeout", "5", "dump-flows", "table=1,tcp"); out != "table=1, priority=300,tcp actions=drop\n" {
			t.Fatalf("--timeout 5: %q", out)
		}
		_, stderr, code := flowctl(ctx, "", "release", "--help")
		if code != 0 {
			t.Fatal(stderr)
		}
		stdout, _, _ := flowctl(ctx, "", "release", "--help")
		if !regexp.MustCompile(`--timeout duration +.*\(default 30s\)`).MatchString(stdout) || strings.Contains(stdout, "1m0s") {
			t.Fatalf("release --help disagrees with itself on --timeout:\n%s", stdout)
		}
	})

	t.Run("a line over 1 MiB names file, line and limit", func(t *testing.T) {
		big := filepath.Join(sb.Dir(), "big.flows")
		long := "table=0,priority=1,ip,actions=" + strings.Repeat("drop,", 1<<18)
		if err := os.WriteFile(big, []byte("table=0,priority=2,actions=drop\n# a comment\n"+long+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"add-flows", "replace-flows"} {
			stderr := fails(1, "", cmd, "--module", "big", big)
			if !strings.Contains(stderr, big+":3: line longer than "+strconv.Itoa(1<<20)+" bytes (1 MiB), the most flowstated takes for one entry") ||
				strings.Contains(stderr, "token too long") {
				t.Fatalf("%s of a long line:\n%s", cmd, stderr)
			}
		}
		if out := ok("", "dump-flows", "table=0"); strings.Contains(out, "priority=2 ") {
			t.Fatalf("a file with a long line left its first flow:\n%s", out)
		}
	})
}
