package deploy

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// helpFlags are the long flags a --help lists under heading ("Flags:" or
// "Global Flags:"), --help itself left out. A flag with a short form is
// also listed as -x=long, which docFlags uses to read a short one.
func helpFlags(t *testing.T, binary string, heading string, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append(args, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s --help: %v\n%s", binary, strings.Join(args, " "), err, out)
	}
	var flags []string
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case line == heading:
			in = true
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			if m := regexp.MustCompile(`^\s+(?:-(\w), )?--([\w-]+)`).FindStringSubmatch(line); m != nil && m[2] != "help" {
				flags = append(flags, m[2])
				if m[1] != "" {
					shorts[m[1]] = m[2]
				}
			}
		}
	}
	slices.Sort(flags)
	return flags
}

// helpCommands are the commands a --help lists, help left out.
func helpCommands(t *testing.T, binary string) []string {
	t.Helper()
	out, err := exec.Command(binary, "--help").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case line == "Available Commands:":
			in = true
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			if f := strings.Fields(line); len(f) > 0 && f[0] != "help" {
				cmds = append(cmds, f[0])
			}
		}
	}
	return cmds
}

// section is the text of docs/operations.md from heading to the next
// heading.
func section(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("docs/operations.md has no %q", heading)
	}
	s = s[i+len(heading)+2:]
	if j := regexp.MustCompile(`\n#{1,4} `).FindStringIndex(s); j != nil {
		s = s[:j[0]]
	}
	return s
}

// shorts maps the short flags seen by helpFlags to their long names
// (flowctl's are the same letter for the same flag in every command).
var shorts = map[string]string{}

// docFlags are the flags named in the code spans of text: --long, or -x
// for a short flag --help lists.
func docFlags(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`[^`]*`").FindAllString(text, -1) {
		for _, f := range regexp.MustCompile("(?:^|[\\s\\[|(`])--?([a-z][\\w-]*)").FindAllStringSubmatch(m, -1) {
			if len(f[1]) == 1 {
				if long, ok := shorts[f[1]]; ok {
					out = append(out, long)
				}
				continue
			}
			out = append(out, f[1])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestFlowstatedFlagsDocumented: the flowstated flags table of
// docs/operations.md lists exactly the flags of flowstated --help.
func TestFlowstatedFlagsDocumented(t *testing.T) {
	var documented []string
	for _, line := range strings.Split(section(t, "### flowstated flags"), "\n") {
		if m := regexp.MustCompile("^\\| `--([\\w-]+)").FindStringSubmatch(line); m != nil {
			documented = append(documented, m[1])
		}
	}
	slices.Sort(documented)
	have := helpFlags(t, bin(t, "flowstated"), "Flags:")
	have = slices.DeleteFunc(have, func(f string) bool { return f == "version" }) // in the flowctl paragraph
	compareFlags(t, "flowstated", documented, have)
	if len(have) < 28 {
		t.Errorf("flowstated --help lists %d flags, want at least 28: the parse is broken", len(have))
	}
}

// TestFlowctlFlagsDocumented: each row of the flowctl commands table names
// a command of flowctl --help and exactly the flags of its --help; every
// command has a row; the global flags paragraph names exactly flowctl's
// persistent flags.
func TestFlowctlFlagsDocumented(t *testing.T) {
	flowctl := bin(t, "flowctl")
	text := section(t, "### flowctl")
	global, _, _ := strings.Cut(strings.TrimSpace(text), "\n\n")
	if !strings.HasPrefix(global, "Global flags:") {
		t.Fatalf("the flowctl section does not open with its global flags:\n%s", global)
	}
	compareFlags(t, "flowctl (global)", docFlags(global), helpFlags(t, flowctl, "Flags:"))
	globals := helpFlags(t, flowctl, "Global Flags:", "status")

	// The commands table: from its header to the blank line after it.
	// Its first cell is the synopsis, the second may name other flags
	// (ovs-ofctl's, the ones completion completes).
	rows := map[string][2]string{}
	table := text[strings.Index(text, "| Command | |"):]
	table, _, _ = strings.Cut(table, "\n\n")
	for _, line := range strings.Split(table, "\n")[2:] {
		cells := strings.SplitN(strings.TrimPrefix(line, "| "), " | ", 2)
		for _, m := range regexp.MustCompile("`([a-z][\\w-]*)").FindAllStringSubmatch(cells[0], -1) {
			rows[m[1]] = [2]string{cells[0], line}
		}
	}
	cmds := helpCommands(t, flowctl)
	for _, c := range cmds {
		row, ok := rows[c]
		if !ok {
			t.Errorf("flowctl %s has no row in docs/operations.md's flowctl table", c)
			continue
		}
		delete(rows, c)
		have := helpFlags(t, flowctl, "Flags:", c)
		// A global flag is documented once, in the paragraph, unless
		// the command has its own (prestart's --timeout).
		notGlobal := func(fs []string) []string {
			return slices.DeleteFunc(fs, func(f string) bool { return slices.Contains(globals, f) && !slices.Contains(have, f) })
		}
		synopsis, whole := notGlobal(docFlags(row[0])), notGlobal(docFlags(row[1]))
		for _, f := range synopsis {
			if !slices.Contains(have, f) {
				t.Errorf("flowctl %s: docs/operations.md gives --%s, which --help does not list", c, f)
			}
		}
		for _, f := range have {
			if !slices.Contains(whole, f) {
				t.Errorf("flowctl %s: --help lists --%s, which docs/operations.md does not document", c, f)
			}
		}
	}
	for c := range rows {
		t.Errorf("docs/operations.md documents flowctl %s, which flowctl --help does not list", c)
	}
	if len(cmds) < 20 {
		t.Errorf("flowctl --help lists %d commands, want at least 20: the parse is broken", len(cmds))
	}
}

func compareFlags(t *testing.T, what string, documented, have []string) {
	t.Helper()
	for _, f := range documented {
		if !slices.Contains(have, f) {
			t.Errorf("%s: docs/operations.md documents --%s, which --help does not list", what, f)
		}
	}
	for _, f := range have {
		if !slices.Contains(documented, f) {
			t.Errorf("%s: --help lists --%s, which docs/operations.md does not document", what, f)
		}
	}
}
