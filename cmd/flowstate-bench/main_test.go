package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestGenerateFlows(t *testing.T) {
	for _, n := range []int{0, 1, len(staticFlows), len(staticFlows) + 1, 999, 20000} {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			a, err := generateFlows(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != n {
				t.Fatalf("got %d flows, want %d", len(a), n)
			}
			b, err := generateFlows(n)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a, b) {
				t.Fatal("two calls gave different flows")
			}
			enc, err := encodeFlows(a)
			if err != nil {
				t.Fatal(err)
			}
			if len(enc) != n {
				t.Fatalf("got %d encodings, want %d", len(enc), n)
			}
		})
	}
	if _, err := generateFlows(-1); err == nil {
		t.Error("generateFlows(-1) succeeded")
	}
	if _, err := generateFlows(slotsPerGroup*maxPods + slotsPerGroup); err == nil {
		t.Error("generateFlows beyond the port range succeeded")
	}
}

// TestGenerateFlowsCoversThePipeline checks that a modest count already has
// every kind of match and action the benchmark claims to exercise.
func TestGenerateFlowsCoversThePipeline(t *testing.T) {
	lines, err := generateFlows(1000)
	if err != nil {
		t.Fatal(err)
	}
	text := flowFile(lines)
	for _, want := range []string{
		"in_port=", "nw_src=", "nw_dst=", "/24", "/16", "tcp,", "udp,", "tp_dst=",
		"reg0=0x2/0xf", "reg1=", "reg3=0x", "/0xffff,", "ct_state=+new+trk", "ct_state=+inv+trk",
		"set_field:", "->reg2", "resubmit(,40)", "goto_table:", "ct(commit,table=", "zone=", "output:", "actions=drop",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("generated flows lack %q", want)
		}
	}
}

func TestCheckFlowsRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"same identity, other actions", []string{
			"table=40,priority=100,ip,reg1=0x1,actions=drop",
			"table=40,priority=100,ip,reg1=0x1,actions=goto_table:50",
		}, "identity of line 1"},
		{"same identity, other field order", []string{
			"table=10,priority=200,ip,in_port=3,nw_src=10.244.0.2,actions=goto_table:20",
			"table=10,priority=200,in_port=3,ip,nw_src=10.244.0.2,actions=drop",
		}, "identity of line 1"},
		{"unparsable", []string{"table=0,priority=1,tp_dst=80,actions=drop"}, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := encodeFlows(tc.lines)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("encodeFlows = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestOfctlAcceptsFlows has ovs-ofctl parse the generated file offline.
func TestOfctlAcceptsFlows(t *testing.T) {
	ofctl, err := exec.LookPath("ovs-ofctl")
	if err != nil {
		t.Fatal(sandbox.InstallHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lines, err := generateFlows(2000)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "flows.txt")
	if err := os.WriteFile(f, []byte(flowFile(lines)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, ofctl, "-O", "OpenFlow15", "parse-flows", f).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl parse-flows: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "OFPT_FLOW_MOD"); n != len(lines) {
		t.Fatalf("ovs-ofctl parsed %d flow mods, want %d", n, len(lines))
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		flows   []int
		wantErr bool
	}{
		{nil, []int{200000}, false},
		{[]string{"-flows", "200000,1000000"}, []int{200000, 1000000}, false},
		{[]string{"-flows", "10000,50k, 1M"}, []int{10000, 50000, 1000000}, false},
		{[]string{"-writers", "0"}, nil, true},
		{[]string{"-declare-timeout", "0s"}, nil, true},
		{[]string{"-flows", "0"}, nil, true},
		{[]string{"-flows", "10,x"}, nil, true},
		{[]string{"-runs", "0"}, nil, true},
		{[]string{"-batch", "0"}, nil, true},
		{[]string{"-timeout", "0s"}, nil, true},
		{[]string{"extra"}, nil, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseFlags(tc.args, &bytes.Buffer{})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseFlags(%q) succeeded", tc.args)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.flows, tc.flows) || o.runs != 3 || o.batch != 1000 || o.writers != 8 {
				t.Fatalf("parseFlags(%q) = %+v", tc.args, o)
			}
		})
	}
}

func TestMedianAndRatio(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{ms(3), 3 * time.Millisecond},
		{ms(5, 1, 3), 3 * time.Millisecond},
		{ms(4, 1, 2, 3), 2500 * time.Microsecond},
		{nil, 0},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if got, want := fmtRatio(ms(100, 300, 200), ms(100, 100, 100)), "**2.00×** (1.00–3.00)"; got != want {
		t.Errorf("fmtRatio = %q, want %q", got, want)
	}
	if got, want := fmtDur(-1500*time.Microsecond), "−1.50 ms"; got != want {
		t.Errorf("fmtDur = %q, want %q", got, want)
	}
}

func TestCommandLine(t *testing.T) {
	got := commandLine([]string{"/tmp/go-build1/exe/flowstate-bench", "-flows", "1,2", "-x", "a b"})
	if want := `flowstate-bench -flows 1,2 -x "a b"`; got != want {
		t.Fatalf("commandLine = %q, want %q", got, want)
	}
}

// TestRun runs the whole benchmark on a few hundred flows, flowstated and
// flowctl built from this module: both sides must agree on every flow
// table, and the report must hold every figure. It times nothing.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	o := options{flows: []int{300}, runs: 1, batch: 100, writers: 3, declareMax: time.Minute, timeout: 2 * time.Minute,
		cpuProf: filepath.Join(t.TempDir(), "fs")}
	if err := run(ctx, o, "flowstate-bench -flows 300", &out, &progress); err != nil {
		if errors.Is(err, sandbox.ErrNotInstalled) {
			t.Fatal(sandbox.InstallHint)
		}
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	report := out.String()
	checkReport(t, report, 300, []string{
		"flowstate-bench -flows 300",
		"| 300 | restore, flowstated running: until forwarding resumes |",
		"| 300 | restore, flowstated running: until the flag is cleared and acknowledged |",
		"| 300 | start-up with the flows stored",
		"| 300 | start-up: until the API serves |",
		"| 300 | declare: `flowctl add-flows` of the file, one command |",
		"| 300 | declare: Go client, 3 writers, Puts of 100 encoded flows |",
		"| 300 | declare with vswitchd down (stored only): `flowctl add-flows` of the file |",
		"| 300 | declare with vswitchd down (stored only): Go client, 3 writers, Puts of 100 |",
		"| 300 | no-op reconcile |",
		"| 300 | replace-flows: `flowctl replace-flows` of half the flows (one Sync, the other half removed) |",
		"| 300 | idle, ",
		"ovs-vswitchd (Open vSwitch)",
		"300 flows: store ",
	})
	if strings.Contains(report, "n/a") {
		t.Errorf("report has a figure it could not measure:\n%s", report)
	}
	// One profile per flowstated process: two declares live and two with
	// vswitchd down, the reconciles' and restores', and the start-up's.
	profiles, err := filepath.Glob(o.cpuProf + ".300.*.pprof")
	if err != nil || len(profiles) != 6 {
		t.Errorf("profiles %v (%v), want 6", profiles, err)
	}
	for _, p := range profiles {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("profile %s: %v, empty", p, err)
		}
	}
}

func TestSameFlows(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []string
		want []string // substrings of the error; nil: no error
	}{
		{"equal", []string{"x", "y"}, []string{"x", "y"}, nil},
		{"both empty", nil, nil, nil},
		{"one missing", []string{"x", "y"}, []string{"x"}, []string{"a has 2 flows, b has 1", "1 only in a, 0 only in b", "only in a #1: y"}},
		{"one changed", []string{"p=1 actions=drop"}, []string{"p=1 actions=output:2"},
			[]string{"only in a #1: p=1 actions=drop", "only in b #1: p=1 actions=output:2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sameFlows("a", tc.a, "b", tc.b)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error for different flow tables")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
