package ofctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

const installOVS = "install Open vSwitch: apt-get update && apt-get install -y openvswitch-switch"

// needOVS fails the test when the OVS binaries are missing.
func needOVS(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range append([]string{"ovs-ofctl"}, bins...) {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s not found: %s", b, installOVS)
		}
	}
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var hexDumpLine = regexp.MustCompile(`^[0-9a-f]{8}  (.*?)\|`)

// ofctlParse asks ovs-ofctl how it encodes a flow: the printed flow_mod and
// the bytes it would send.
func ofctlParse(ctx context.Context, line string) (text string, msg []byte, err error) {
	return ofctlParseAs(ctx, "parse-flow", "OFPT_FLOW_MOD", line)
}

// ofctlParseGroup asks ovs-ofctl how it encodes a group (parse-group).
func ofctlParseGroup(ctx context.Context, line string) ([]byte, error) {
	_, msg, err := ofctlParseAs(ctx, "parse-group", "OFPT_GROUP_MOD", line)
	return msg, err
}

// ofctlParseAs runs an ovs-ofctl parse command on line and returns the
// line of the printout that starts with prefix and the message's bytes.
func ofctlParseAs(ctx context.Context, cmd, prefix, line string) (text string, msg []byte, err error) {
	out, err := exec.CommandContext(ctx, "ovs-ofctl", "-O", "OpenFlow15", "-mmmmm", cmd, line).CombinedOutput()
	if err != nil {
		return "", nil, &ofctlError{strings.TrimSpace(string(out))}
	}
	var hx strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if m := hexDumpLine.FindStringSubmatch(l); m != nil {
			hx.WriteString(strings.NewReplacer(" ", "", "-", "").Replace(m[1]))
		} else if strings.HasPrefix(l, prefix) {
			text = l
		}
	}
	msg, err = hex.DecodeString(hx.String())
	return text, msg, err
}

type ofctlError struct{ msg string }

func (e *ofctlError) Error() string { return e.msg }

// ofctlPrint asks ovs-ofctl how it decodes our bytes. Its log lines (for
// example that OFPAT_SET_MPLS_TTL is deprecated, although ovs-ofctl sends
// it itself) go to stderr and are not part of the printout.
func ofctlPrint(ctx context.Context, msg []byte) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ovs-ofctl", "ofp-print", hex.EncodeToString(msg))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &ofctlError{strings.TrimSpace(string(out) + stderr.String())}
	}
	return strings.TrimSpace(string(out)), nil
}

var xidRE = regexp.MustCompile(`\(xid=0x[0-9a-f]+\)`)

func normXid(s string) string { return xidRE.ReplaceAllString(s, "(xid=X)") }

// readCorpus returns the non-comment lines of a flow file.
func readCorpus(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}
