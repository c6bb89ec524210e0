package main

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// logRecord is one line of --log-format json.
type logRecord map[string]any

func (r logRecord) level() string { s, _ := r["level"].(string); return s }
func (r logRecord) msg() string   { s, _ := r["msg"].(string); return s }

// records parses a JSON log; a line that is not JSON fails the test.
func records(t *testing.T, log string) []logRecord {
	t.Helper()
	var out []logRecord
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r logRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not a JSON log line: %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// TestBinaryLogs is issue 24's logs, read from the binary's JSON log: a
// normal start (--guard=spawn) logs no ERROR and one OVSDB connect; one
// vswitchd restart is one WARN; durations are strings; SIGUSR1 turns debug
// on and SIGUSR2 back off.
func TestBinaryLogs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--log-format", "json")
	n.start(ctx)
	n.syncPipeline(ctx)
	n.armedWithGuard(ctx)
	start := records(t, n.logs.String())
	connects := 0
	for _, r := range start {
		if r.level() == "ERROR" {
			t.Errorf("ERROR at a normal start: %v", r)
		}
		if strings.Contains(r.msg(), "connected to ovsdb-server") || r.msg() == "ovsdb connected" {
			connects++
		}
		for k, v := range r {
			// Every duration the daemon logs, by its key: a number
			// would be nanoseconds.
			if _, isNum := v.(float64); isNum && (k == "grace" || k == "check" || k == "waited" || k == "duration" || k == "ack") {
				t.Errorf("duration %s=%v logged as a number: %v", k, v, r)
			}
		}
	}
	if connects != 1 {
		t.Errorf("%d OVSDB connect lines at start, want 1", connects)
	}

	mark := len(n.logs.String())
	n.restartVswitchdPlainly(ctx)
	n.armedWithGuard(ctx)
	n.poll(ctx, "the restart's replay logged", func() bool {
		return strings.Contains(n.logs.String()[mark:], `"msg":"flow-restore-wait re-armed`)
	})
	var warns []string
	for _, r := range records(t, n.logs.String()[mark:]) {
		if r.level() == "WARN" || r.level() == "ERROR" {
			warns = append(warns, r.msg())
		}
	}
	if len(warns) != 1 || warns[0] != "bridge disconnected" {
		t.Errorf("one vswitchd restart logged %q, want one WARN \"bridge disconnected\"", warns)
	}

	// The level at run time: SIGUSR1 to debug, SIGUSR2 back to info.
	debugLines := func(from int) int {
		c := 0
		for _, r := range records(t, n.logs.String()[from:]) {
			if r.level() == "DEBUG" {
				c++
			}
		}
		return c
	}
	mark = len(n.logs.String())
	n.signal(ctx, syscall.SIGUSR1)
	n.poll(ctx, "debug lines after SIGUSR1", func() bool {
		_, _ = n.c.Status(ctx) // a Status call finishes at debug
		return strings.Contains(n.logs.String()[mark:], `"msg":"log level changed"`) && debugLines(mark) > 0
	})
	n.signal(ctx, syscall.SIGUSR2)
	n.poll(ctx, "back at info after SIGUSR2", func() bool {
		return strings.Count(n.logs.String()[mark:], `"msg":"log level changed"`) == 2
	})
	mark = len(n.logs.String())
	for range 5 {
		if _, err := n.c.Status(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if d := debugLines(mark); d != 0 {
		t.Errorf("%d debug lines after SIGUSR2:\n%s", d, n.logs.String()[mark:])
	}
}

// TestUsagePlaceholders: no flag's help shows a placeholder that pflag took
// from backticks in its usage text (--guard once read "--guard flowstated
// guard"); the one placeholder meant is --cpuprofile's FILE.
func TestUsagePlaceholders(t *testing.T) {
	cmd := newCommand()
	check := func(fs *pflag.FlagSet) {
		fs.VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if strings.Contains(f.Usage, "`") && !(f.Name == "cpuprofile" && name == "FILE") {
				t.Errorf("--%s: usage %q makes the placeholder %q", f.Name, f.Usage, name)
			}
		})
	}
	check(cmd.Flags())
	for _, sub := range cmd.Commands() {
		check(sub.Flags())
	}
}
