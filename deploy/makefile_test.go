package deploy

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMakeBuildStampsCommit: make build links the commit in, as
// deploy/Dockerfile does, so --version names it where the toolchain records
// no VCS revision (-buildvcs=false, a copied tree).
func TestMakeBuildStampsCommit(t *testing.T) {
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	cmd := exec.CommandContext(ctx, "make", "-s", "-n", "build")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	want := "-X github.com/flowstate-io/flowstate/internal/version.Commit=" + strings.TrimSpace(string(head))
	if !strings.Contains(string(out), "go build") || !strings.Contains(string(out), want) {
		t.Fatalf("make build runs:\n%s\nwant it to link %s", out, want)
	}
}
