package ofctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOVSTestsCoverage measures how many flows of Open vSwitch's own test
// suite ParseFlow handles exactly as ovs-ofctl does. It needs the suite's
// tests/*.at files, which are not part of this repository: set
// OVS_TESTS_DIR to a directory holding them (for example
// `git -C ovs archive v3.1.0 tests | tar -x -C /tmp/ovs`, then
// OVS_TESTS_DIR=/tmp/ovs/tests). OVS_TESTS_REPORT names a file that gets
// every flow we miss, with the reason; OVS_TESTS_CORPUS a directory that
// gets the flows and groups ovs-ofctl accepts (testdata/ovs-suite is that
// of OVS 3.1.0). With OVS_TESTS_SWITCH set, every
// handled flow is also installed on a private vswitchd, which must hold it
// as ParseFlow encodes it (about 30 s).
//
// Candidate flows are the lines that carry "actions=" (the argument of
// add-flow, a line of an add-flows here-document, a "# actions=..." comment
// of ofp-actions.at, a dump-flows line); only those that
// `ovs-ofctl -O OpenFlow15 parse-flow` accepts count. A flow is handled when
// ParseFlow gives ovs-ofctl's bytes and FormatFlow's text parses back to
// them.
func TestOVSTestsCoverage(t *testing.T) {
	dir := os.Getenv("OVS_TESTS_DIR")
	if dir == "" {
		t.Skip("set OVS_TESTS_DIR to Open vSwitch's tests/ directory to measure coverage")
	}
	needOVS(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.at"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .at files in %s (%v)", dir, err)
	}
	seen := map[string]bool{}
	var flows, groups []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			for _, c := range flowCandidates(l) {
				if !seen[c] {
					seen[c] = true
					flows = append(flows, c)
				}
			}
			for _, c := range groupCandidates(l) {
				if !seen[c] {
					seen[c] = true
					groups = append(groups, c)
				}
			}
		}
	}
	sort.Strings(flows)
	sort.Strings(groups)
	ctx := testCtx(t, 10*time.Minute)

	var report strings.Builder
	for _, kind := range []struct {
		name  string
		cands []string
		check func(context.Context, string) ovsTestResult
	}{{"flows", flows, checkAgainstOfctl}, {"groups", groups, checkGroupAgainstOfctl}} {
		res := make([]ovsTestResult, len(kind.cands))
		var wg sync.WaitGroup
		next := make(chan int)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					res[i] = kind.check(ctx, kind.cands[i])
				}
			}()
		}
		for i := range kind.cands {
			next <- i
		}
		close(next)
		wg.Wait()

		accepted, handled := 0, 0
		fmt.Fprintf(&report, "# %s\n", kind.name)
		for _, r := range res {
			if !r.accept {
				continue
			}
			accepted++
			if r.miss == "" {
				handled++
				continue
			}
			fmt.Fprintf(&report, "%s\n\t%s\n", r.line, r.miss)
		}
		t.Logf("%s: %d candidate lines, ovs-ofctl accepts %d, flowstate handles %d", kind.name, len(kind.cands), accepted, handled)
		if out := os.Getenv("OVS_TESTS_CORPUS"); out != "" {
			writeAccepted(t, filepath.Join(out, kind.name+".txt"), res)
		}
		if kind.name == "flows" && os.Getenv("OVS_TESTS_SWITCH") != "" {
			var lines []string
			for _, r := range res {
				if r.accept && r.miss == "" {
					lines = append(lines, r.line)
				}
			}
			checkHandledOnSwitch(ctx, t, lines, &report)
		}
	}
	if path := os.Getenv("OVS_TESTS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// writeAccepted writes the lines ovs-ofctl accepts to path, one a line:
// the OVS test-suite corpus of TestSyntaxOnThisVersion (testdata/ovs-suite).
func writeAccepted(t *testing.T, path string, res []ovsTestResult) {
	var b strings.Builder
	for _, r := range res {
		if r.accept {
			b.WriteString(r.line + "\n")
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

var (
	addGroupArg = regexp.MustCompile(`(?:add-groups?|mod-group|parse-group) +(?:-\S+(?: +OpenFlow1\d)? +)*(?:\w+ +)?(?:'([^']*)'|"([^"]*)"|(group_id=[^ '"\]]+))`)
	addFlowArg  = regexp.MustCompile(`(?:add-flows?|parse-flows?|mod-flows) +(?:-\S+(?: +OpenFlow1\d)? +)*(?:\w+ +)?(?:'([^']*)'|"([^"]*)"|([^ '"\]]*actions=[^ '"\]]+))`)
	atDnl       = regexp.MustCompile(`\s+dnl$`)
)

// flowCandidates returns the flows a line of a .at file may hold.
func flowCandidates(l string) []string {
	if !strings.Contains(l, "actions=") {
		return nil
	}
	if ms := addFlowArg.FindAllStringSubmatch(l, -1); ms != nil {
		var out []string
		for _, m := range ms {
			out = append(out, m[1]+m[2]+m[3])
		}
		return out
	}
	l = strings.TrimSpace(atDnl.ReplaceAllString(l, ""))
	l = strings.TrimPrefix(l, "# ")
	// Autotest quadrigraphs.
	l = strings.NewReplacer("@<:@", "[", "@:>@", "]", "@S|@", "$", "@%:@", "#").Replace(l)
	if strings.ContainsAny(l, "'\"`$\\|") || strings.HasPrefix(l, "OFPT_") || strings.HasPrefix(l, "NXT_") {
		return nil
	}
	return []string{l}
}

// checkHandledOnSwitch installs each handled flow alone with ovs-ofctl on
// a private vswitchd and compares what the switch then holds with
// ParseFlow's bytes: the switch is the oracle of its canonical form.
// Flows vswitchd refuses (a missing group, meter or TLV map; actions its
// checks reject) are counted apart.
func checkHandledOnSwitch(ctx context.Context, t *testing.T, lines []string, report *strings.Builder) {
	sb := startSwitch(ctx, t)
	refused, same := 0, 0
	fmt.Fprintf(report, "# flows vswitchd holds differently\n")
	for _, l := range lines {
		fm, err := ParseFlow(l)
		if err != nil {
			t.Fatalf("ParseFlow(%q): %v", l, err)
		}
		ours, err := fm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		st, err := statFromFlowMod(ours)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := sb.Ofctl(ctx, "del-flows", "br0"); err != nil {
			t.Fatalf("del-flows: %v %s", err, out)
		}
		if _, err := sb.Ofctl(ctx, "add-flow", "br0", l); err != nil {
			refused++
			continue
		}
		flows, _, _ := dumpSwitch(ctx, t, sb)
		var held []byte
		for _, f := range flows {
			if f.key() == st.key() {
				held = f.mod
			}
		}
		if bytes.Equal(withoutXid(held), withoutXid(ours)) {
			same++
			continue
		}
		fmt.Fprintf(report, "%s\n\tswitch %x\n\t  ours %x\n", l, held, ours)
	}
	t.Logf("flows on the switch: of %d handled, vswitchd refuses %d; of the %d it takes, it holds %d exactly as ParseFlow encodes them",
		len(lines), refused, len(lines)-refused, same)
}

// groupCandidates returns the groups a line of a .at file may hold: the
// argument of add-group (or mod-group, parse-group) and lines of
// add-groups here-documents.
func groupCandidates(l string) []string {
	if !strings.Contains(l, "group_id=") || !strings.Contains(l, "bucket") {
		return nil
	}
	if ms := addGroupArg.FindAllStringSubmatch(l, -1); ms != nil {
		var out []string
		for _, m := range ms {
			out = append(out, m[1]+m[2]+m[3])
		}
		return out
	}
	l = strings.TrimSpace(atDnl.ReplaceAllString(l, ""))
	l = strings.NewReplacer("@<:@", "[", "@:>@", "]", "@S|@", "$", "@%:@", "#").Replace(l)
	if !strings.HasPrefix(l, "group_id=") || strings.ContainsAny(l, "'\"`$\\|") {
		return nil
	}
	return []string{l}
}

// ovsTestResult is what became of one candidate flow: whether ovs-ofctl
// accepts it and, if so, why ParseFlow does not handle it ("" when it does).
type ovsTestResult struct {
	line   string
	accept bool
	miss   string
}

// checkAgainstOfctl parses a flow with ovs-ofctl and with ParseFlow.
func checkAgainstOfctl(ctx context.Context, line string) ovsTestResult {
	_, want, err := ofctlParse(ctx, line)
	return checkKind(line, "flow", want, err)
}

// checkGroupAgainstOfctl parses a group with ovs-ofctl and with ParseGroup.
func checkGroupAgainstOfctl(ctx context.Context, line string) ovsTestResult {
	want, err := ofctlParseGroup(ctx, line)
	return checkKind(line, "group", want, err)
}

// checkKind compares our encoding of line with ovs-ofctl's (want, or its
// refusal oerr) and checks that our printout parses back to the same
// bytes.
func checkKind(line, kind string, want []byte, oerr error) (r ovsTestResult) {
	r.line = line
	if oerr != nil || len(want) == 0 {
		return r
	}
	r.accept = true
	got, err := encodeText(kind, line)
	if err != nil {
		r.miss = "parse: " + err.Error()
		return r
	}
	if !bytes.Equal(withoutXid(got), withoutXid(want)) {
		r.miss = fmt.Sprintf("bytes differ\n\t got %x\n\twant %x", got, want)
		return r
	}
	text, err := formatBytes(kind, got)
	if err != nil {
		r.miss = "format: " + err.Error()
		return r
	}
	again, err := encodeText(kind, text)
	if err != nil {
		r.miss = fmt.Sprintf("reparse %q: %v", text, err)
		return r
	}
	if !bytes.Equal(again, got) {
		r.miss = fmt.Sprintf("round trip through %q changed the bytes", text)
	}
	return r
}
