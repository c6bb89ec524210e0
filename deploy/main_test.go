package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// binDir holds flowstated and flowctl, built once per run (binaries).
var (
	binDir   string
	buildErr error
	build    sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds flowstated and flowctl, static, as make build would,
// once per run, and returns their directory.
func binaries(t *testing.T) string {
	t.Helper()
	build.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "flowstate-deploy-bin-"); buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binDir+"/", "../cmd/flowstated", "../cmd/flowctl")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// bin is the path of one of the built binaries.
func bin(t *testing.T, name string) string { return filepath.Join(binaries(t), name) }
