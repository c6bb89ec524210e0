package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// dockerfileBuild returns the go build command line of deploy/Dockerfile's
// build stage, its continuation lines joined, from "CGO_ENABLED=0".
func dockerfileBuild(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, l := range strings.Split(joined, "\n") {
		if i := strings.Index(l, "CGO_ENABLED=0 go build"); i >= 0 && strings.HasPrefix(strings.TrimSpace(l), "RUN") {
			return l[i:]
		}
	}
	t.Fatal("deploy/Dockerfile has no RUN ... CGO_ENABLED=0 go build line")
	return ""
}

// TestDockerfileBuild runs deploy/Dockerfile's go build line as the image
// build does (VERSION and COMMIT as its --build-arg values, no VCS stamp:
// the build context has no .git), then checks that both binaries and the
// running daemon report them: --version, flowstate_build_info and flowctl
// status (the server's build beside the client's).
func TestDockerfileBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	const ver, commit = "v9.8.7-test", "0123456789abcdef0123456789abcdef01234567"
	line := dockerfileBuild(t)
	if !strings.Contains(line, "-o /out/") {
		t.Fatalf("the Dockerfile's build line no longer writes to /out/: %s", line)
	}
	out := t.TempDir()
	line = strings.Replace(line, "-o /out/", "-o "+out+"/", 1)
	build := exec.CommandContext(ctx, "bash", "-c", line)
	build.Dir = "../.."
	build.Env = append(os.Environ(), "VERSION="+ver, "COMMIT="+commit)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	want := ver + " (commit " + commit + ")"
	for _, prog := range []string{"flowstated", "flowctl"} {
		b, err := exec.CommandContext(ctx, filepath.Join(out, prog), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(b), prog+" "+want) {
			t.Fatalf("%s --version: %q %v, want %q", prog, b, err, want)
		}
	}

	n := newNode(ctx, t, []string{"br-int"}, "--log-format", "json", "--metrics-listen", "127.0.0.1:0")
	n.bin = filepath.Join(out, "flowstated")
	n.start(ctx)
	m := regexp.MustCompile(`"msg":"serving".*"metrics":"([^"]+)"`).FindStringSubmatch(n.logs.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", n.logs.String())
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m[1]+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	info := regexp.MustCompile(`(?m)^flowstate_build_info\{.*\} 1$`).FindString(string(body))
	if !strings.Contains(info, `revision="`+commit+`"`) || !strings.Contains(info, `version="`+ver+`"`) {
		t.Fatalf("flowstate_build_info: %q, want version %s and revision %s", info, ver, commit)
	}
	st, err := exec.CommandContext(ctx, filepath.Join(out, "flowctl"), "--server", "unix://"+n.sock, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(st), "server flowstated "+want+"; client flowctl "+want) {
		t.Fatalf("flowctl status: %v\n%s", err, st)
	}
}
