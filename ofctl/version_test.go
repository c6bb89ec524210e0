package ofctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSyntaxOnThisVersion runs the OVS test-suite corpus (testdata/ovs-suite:
// the flows and groups of Open vSwitch 3.1.0's tests/*.at that its
// ovs-ofctl accepts, written by TestOVSTestsCoverage) and the Antrea
// pipeline through the ovs-ofctl on PATH, whatever its version (the matrix,
// scripts/test-matrix.sh, puts 2.15's and 3.5's there). Each line must give
// ParseFlow's (or ParseGroup's) bytes, or the outcome
// testdata/ovs-suite/expected.txt states for this version with its reason:
// flowstate refuses it, this ovs-ofctl refuses it, or this ovs-ofctl
// encodes it otherwise. A listed line that now gives the same bytes fails
// too, so the list stays true. FLOWSTATE_SYNTAX_REPORT names a file that
// gets every line's outcome that is not "same", in expected.txt's form.
func TestSyntaxOnThisVersion(t *testing.T) {
	needOVS(t)
	ctx := testCtx(t, 3*time.Minute)
	version := ofctlVersion(ctx, t)
	expected := readExpected(t, "testdata/ovs-suite/expected.txt", version)
	var report strings.Builder
	bad := 0
	for _, c := range []struct{ kind, file string }{
		{"flow", "testdata/ovs-suite/flows.txt"},
		{"group", "testdata/ovs-suite/groups.txt"},
		{"flow", filepath.Join(productionCorpusDir(), "flows.txt")},
		{"group", filepath.Join(productionCorpusDir(), "groups.txt")},
	} {
		lines := readCorpus(t, c.file)
		wants := ofctlEncodeAll(ctx, t, c.kind, lines)
		same := 0
		for i, line := range lines {
			got := syntaxOutcome(c.kind, line, wants[i])
			if got.outcome == "same" {
				same++
			} else {
				fmt.Fprintf(&report, "%s\t%s\t%s\t%s\n", version, got.outcome, line, got.detail)
			}
			want, listed := expected[line]
			switch {
			case !listed && got.outcome != "same":
				bad++
				t.Errorf("OVS %s: %s: %s %q (%s), and testdata/ovs-suite/expected.txt does not say why", version, c.file, got.outcome, line, got.detail)
			case listed && want.outcome != got.outcome:
				bad++
				t.Errorf("OVS %s: %s: %q is %s (%s), expected.txt says %s: %s", version, c.file, line, got.outcome, got.detail, want.outcome, want.detail)
			}
		}
		t.Logf("OVS %s: %s: %d lines, %d give ovs-ofctl's bytes exactly", version, c.file, len(lines), same)
	}
	if path := os.Getenv("FLOWSTATE_SYNTAX_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if bad > 0 {
		t.Logf("OVS %s: %d lines differ from expected.txt; this version's outcomes (FLOWSTATE_SYNTAX_REPORT):\n%s", version, bad, report.String())
	}
}

// lineOutcome is what became of one line on this version: "same" (ParseFlow
// gives ovs-ofctl's bytes and reads its own printout back to them),
// "flowstate-refuses", "ovs-refuses" or "differs", and why.
type lineOutcome struct{ outcome, detail string }

// ofctlResult is ovs-ofctl's encoding of one line, or its refusal.
type ofctlResult struct {
	msg []byte
	err error
}

func syntaxOutcome(kind, line string, want ofctlResult) lineOutcome {
	got, err := encodeText(kind, line)
	switch {
	case err != nil:
		return lineOutcome{"flowstate-refuses", err.Error()}
	case want.err != nil:
		return lineOutcome{"ovs-refuses", want.err.Error()}
	case !bytes.Equal(withoutXid(got), withoutXid(want.msg)):
		return lineOutcome{"differs", fmt.Sprintf("ours %x, ovs-ofctl's %x", got, want.msg)}
	}
	text, err := formatBytes(kind, got)
	if err != nil {
		return lineOutcome{"flowstate-refuses", "format: " + err.Error()}
	}
	if again, err := encodeText(kind, text); err != nil || !bytes.Equal(again, got) {
		return lineOutcome{"flowstate-refuses", fmt.Sprintf("printed as %q, which does not read back", text)}
	}
	return lineOutcome{"same", ""}
}

// ofctlVersion is the major.minor of the ovs-ofctl on PATH ("3.1").
func ofctlVersion(ctx context.Context, t *testing.T) string {
	out, err := exec.CommandContext(ctx, "ovs-ofctl", "--version").Output()
	if err != nil {
		t.Fatalf("ovs-ofctl --version: %v", err)
	}
	m := regexp.MustCompile(`\) (\d+\.\d+)\.`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("ovs-ofctl --version: no version in %q", out)
	}
	return string(m[1])
}

// readExpected reads expected.txt's lines for version: VERSIONS<TAB>OUTCOME
// <TAB>LINE<TAB>REASON, VERSIONS a comma-separated list or "all".
func readExpected(t *testing.T, path, version string) map[string]lineOutcome {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]lineOutcome{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != 4 || f[3] == "" {
			t.Fatalf("%s:%d: want VERSIONS, OUTCOME, LINE and REASON separated by tabs", path, n)
		}
		for _, v := range strings.Split(f[0], ",") {
			if v == "all" || v == version {
				out[f[2]] = lineOutcome{f[1], f[3]}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ofctlEncodeAll asks ovs-ofctl for every line's bytes: one parse-flows of
// the whole file, halved until each part passes or is one line, which
// parse-flow then reads alone (a version refuses a few lines: a few dozen
// runs instead of one per line). Groups, which have no parse-groups, go
// one at a time.
func ofctlEncodeAll(ctx context.Context, t *testing.T, kind string, lines []string) []ofctlResult {
	res := make([]ofctlResult, len(lines))
	if kind == "group" {
		for i, l := range lines {
			_, res[i].msg, res[i].err = ofctlParseAs(ctx, "parse-group", "OFPT_GROUP_MOD", l)
		}
		return res
	}
	file := filepath.Join(t.TempDir(), "lines.txt")
	var encode func(lo, hi int)
	encode = func(lo, hi int) {
		if hi-lo == 1 {
			_, res[lo].msg, res[lo].err = ofctlParse(ctx, lines[lo])
			return
		}
		if err := os.WriteFile(file, []byte(strings.Join(lines[lo:hi], "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctx, "ovs-ofctl", "-O", "OpenFlow15", "-mmmmm", "parse-flows", file).Output()
		if msgs := splitHexDumps(out, "OFPT_FLOW_MOD"); err == nil && len(msgs) == hi-lo {
			for i, m := range msgs {
				res[lo+i].msg = m
			}
			return
		}
		mid := (lo + hi) / 2
		encode(lo, mid)
		encode(mid, hi)
	}
	if len(lines) > 0 {
		encode(0, len(lines))
	}
	return res
}

// splitHexDumps returns the messages of an ovs-ofctl -mmmmm printout, one
// per line that starts with prefix.
func splitHexDumps(out []byte, prefix string) [][]byte {
	var msgs [][]byte
	var hx strings.Builder
	flush := func() {
		if hx.Len() > 0 {
			b, _ := hex.DecodeString(hx.String())
			msgs = append(msgs, b)
			hx.Reset()
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if m := hexDumpLine.FindStringSubmatch(l); m != nil {
			hx.WriteString(strings.NewReplacer(" ", "", "-", "").Replace(m[1]))
		} else if strings.HasPrefix(l, prefix) {
			flush()
		}
	}
	flush()
	return msgs
}
