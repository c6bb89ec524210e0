package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// syncRun measures a module replacing its whole set by half of it, the
// other half removed: `flowctl replace-flows` of the first half of the file
// (one Sync, staged past 50,000 entries) into the running flowstated, which
// holds the whole file, stored and on the switch; then `ovs-ofctl --bundle
// replace-flows` of the same half into the bridge holding the whole file
// again. It leaves both the store and the switch with the whole file.
func (e *env) syncRun(ctx context.Context) (fs, of sample, err error) {
	half, err := e.halfFile()
	if err != nil {
		return fs, of, err
	}
	m := newMeter(driverChildren)
	if err := m.flowstated(e.d.pid(), false); err != nil {
		return fs, of, err
	}
	m.vswitchd(e.sb.VswitchdPID())
	m.begin()
	out, err := e.flowctl(ctx, "replace-flows", "--module", module, half)
	fs = m.stop()
	if err != nil {
		return fs, of, fmt.Errorf("flowctl replace-flows of half the flows: %w", err)
	}
	if !strings.Contains(out, "applied") {
		return fs, of, fmt.Errorf("flowctl replace-flows: stored, not applied to the live bridge: %s", out)
	}
	if err := e.dumpHas(ctx, e.flows/2); err != nil {
		return fs, of, fmt.Errorf("after flowctl replace-flows: %w", err)
	}

	// ovs-ofctl from the whole file, as flowstate was.
	if _, err := e.sb.Ofctl(ctx, "--bundle", "replace-flows", bridge, e.file); err != nil {
		return fs, of, err
	}
	m = newMeter(driverChildren)
	m.vswitchd(e.sb.VswitchdPID())
	if _, err := e.sb.Ofctl(ctx, "--bundle", "replace-flows", bridge, half); err != nil {
		return fs, of, err
	}
	of = m.stop()
	if err := e.dumpHas(ctx, e.flows/2); err != nil {
		return fs, of, fmt.Errorf("after ovs-ofctl replace-flows: %w", err)
	}
	// Back to the whole file on both sides (the switch already equals the
	// store again).
	if _, err := e.flowctl(ctx, "replace-flows", "--module", module, e.file); err != nil {
		return fs, of, fmt.Errorf("flowctl replace-flows of the whole file: %w", err)
	}
	return fs, of, e.dumpHas(ctx, e.flows)
}

// halfFile writes the first half of the flow file, once.
func (e *env) halfFile() (string, error) {
	path := filepath.Join(e.dir, "half.txt")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.WriteFile(path, []byte(flowFile(e.lines[:e.flows/2])), 0o600); err != nil {
		return "", fmt.Errorf("write the half flow file: %w", err)
	}
	return path, nil
}

// flowctl runs the flowctl binary against the running flowstated.
func (e *env) flowctl(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--server", e.sock(), "--bridge", bridge, "--timeout", e.o.declareMax.String()}, args...)
	out, err := exec.CommandContext(ctx, e.bins.flowctl, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, out)
	}
	return string(out), nil
}

// dumpHas checks that the bridge holds n flows (ovs-ofctl dump-aggregate).
func (e *env) dumpHas(ctx context.Context, n int) error {
	out, err := e.sb.Ofctl(ctx, "dump-aggregate", bridge)
	if err != nil {
		return err
	}
	if want := fmt.Sprintf("flow_count=%d", n); !strings.Contains(out, want+"\n") && !strings.HasSuffix(strings.TrimSpace(out), want) {
		return fmt.Errorf("the bridge holds other than %d flows: %s", n, strings.TrimSpace(out))
	}
	return nil
}
