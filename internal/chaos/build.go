package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// BuildFlowstated builds the flowstated binary into dir and returns its
// path. It must run inside the flowstate module (a test, or go run).
func BuildFlowstated(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "flowstated")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/flowstate-io/flowstate/cmd/flowstated").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("chaos: go build flowstated: %w\n%s", err, out)
	}
	return bin, nil
}
