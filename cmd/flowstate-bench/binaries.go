package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// binaries are the flowstated and flowctl executables the benchmark runs as
// processes of their own, so that flowstated's memory and CPU are its own.
type binaries struct {
	flowstated, flowctl string
}

// Package paths of the binaries, built from the module the benchmark runs in.
const (
	flowstatedPkg = "github.com/flowstate-io/flowstate/cmd/flowstated"
	flowctlPkg    = "github.com/flowstate-io/flowstate/cmd/flowctl"
)

// buildBinaries returns the binaries named by -flowstated and -flowctl, and
// builds the others with `go build` into dir: once per benchmark run, before
// any clock starts.
func buildBinaries(ctx context.Context, o options, dir string) (binaries, error) {
	b := binaries{flowstated: o.flowstatedBin, flowctl: o.flowctlBin}
	var pkgs []string
	if b.flowstated == "" {
		b.flowstated = filepath.Join(dir, "flowstated")
		pkgs = append(pkgs, flowstatedPkg)
	}
	if b.flowctl == "" {
		b.flowctl = filepath.Join(dir, "flowctl")
		pkgs = append(pkgs, flowctlPkg)
	}
	if len(pkgs) > 0 {
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %v (run from the flowstate module, or give -flowstated and -flowctl): %w\n%s", pkgs, err, out)
		}
	}
	for _, p := range []string{b.flowstated, b.flowctl} {
		st, err := os.Stat(p)
		if err != nil {
			return b, fmt.Errorf("binary: %w", err)
		}
		if st.Mode()&0o111 == 0 {
			return b, fmt.Errorf("binary %s is not executable", p)
		}
	}
	return b, nil
}
