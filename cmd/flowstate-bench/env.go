package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

const (
	bridge = "br-int"
	module = "bench"
	// stepTimeout bounds one wait (a restore, a convergence) so a stuck
	// daemon fails the run instead of hanging it until -timeout.
	stepTimeout = 10 * time.Minute
	// echoTimeout is flowstated's --ofp-echo-timeout: vswitchd answers no
	// echo while it commits a bundle, which takes longer than the default
	// 5 s at a million flows on this kind of machine.
	echoTimeout = "120s"
)

// env is one sandbox with br-int, the flows, and at most one flowstated
// process managing br-int.
type env struct {
	o       options
	bins    binaries
	sb      *sandbox.Sandbox
	log     *slog.Logger
	dir     string
	file    string   // the flows, one per line, for ovs-ofctl and flowctl
	lines   []string // the same flows
	encoded []client.Entry
	d       *daemon // the running flowstated, or nil
	starts  int     // flowstated processes started, to name their profiles
	flows   int
}

func (e *env) sock() string   { return filepath.Join(e.dir, "fs.sock") }
func (e *env) dbPath() string { return filepath.Join(e.dir, "flowstate.db") }

// setup adds the bridge and its ports, writes the flow file and the boot id.
func (e *env) setup(ctx context.Context) error {
	if err := e.sb.AddBridge(ctx, bridge); err != nil {
		return err
	}
	// The gateway and tunnel ports the pipeline names; pod ports (3 and up)
	// do not exist, which OVS accepts for in_port and output alike.
	for i, p := range []string{"gw0", "tun0"} {
		if err := e.sb.AddPort(ctx, bridge, p, i+1); err != nil {
			return err
		}
	}
	e.file = filepath.Join(e.dir, "flows.txt")
	if err := os.WriteFile(e.file, []byte(flowFile(e.lines)), 0o600); err != nil {
		return fmt.Errorf("write flow file: %w", err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "boot_id"), []byte("bench-boot\n"), 0o600); err != nil {
		return fmt.Errorf("write boot id: %w", err)
	}
	return nil
}

// daemonArgs is flowstated's command line: br-int of the sandbox, no guard
// (nothing outlives the benchmark), no audit (no replay but the measured
// ones), no re-arming (a cleared flag stays observable), and take-over,
// because every declare run starts a fresh store on a bridge an earlier
// store managed.
func (e *env) daemonArgs(phase string) []string {
	args := []string{
		"--listen", "unix://" + e.sock(),
		"--db", e.dbPath(),
		"--boot-id-file", filepath.Join(e.dir, "boot_id"),
		"--ovs-rundir", e.sb.RunDir(),
		"--ovsdb", e.sb.DBAddr(),
		"--bridge", bridge,
		"--guard", "off",
		"--metrics-listen", "",
		"--audit-interval", "0",
		"--rearm-flow-restore-wait=false",
		"--take-over",
		"--ofp-echo-timeout", echoTimeout,
		"--log-level", "info",
	}
	if e.o.cpuProf != "" {
		e.starts++
		p := fmt.Sprintf("%s.%d.%02d-%s.pprof", e.o.cpuProf, e.flows, e.starts, phase)
		e.log.Info("flowstated CPU profile", "file", p)
		args = append(args, "--cpuprofile", p)
	}
	return args
}

// startDaemon starts flowstated (named for the profile by phase) and
// returns once it serves; it does not wait for the bridge.
func (e *env) startDaemon(ctx context.Context, phase string) error {
	if e.d != nil {
		return errors.New("flowstated already running")
	}
	d, err := startDaemon(ctx, e.bins.flowstated, e.daemonArgs(phase), filepath.Join(e.dir, "flowstated.log"), e.sock())
	if err != nil {
		return err
	}
	e.d = d
	return nil
}

// startConverged starts flowstated and waits until br-int converged.
func (e *env) startConverged(ctx context.Context, phase string) error {
	if err := e.startDaemon(ctx, phase); err != nil {
		return err
	}
	return e.waitConverged(ctx)
}

// killDaemon kills flowstated (see daemon.kill).
func (e *env) killDaemon() {
	if e.d != nil {
		e.d.kill()
		e.d = nil
	}
}

func (e *env) stopDaemon() error {
	if e.d == nil {
		return nil
	}
	err := e.d.stop()
	e.d = nil
	return err
}

// close stops flowstated and the sandbox, which removes the directory both
// lived in (unless -keep).
func (e *env) close() error {
	return errors.Join(e.stopDaemon(), e.sb.Close())
}

// waitConverged polls Status; only used outside timed sections (Status
// walks the whole store).
func (e *env) waitConverged(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		b, err := e.bridgeStatus(ctx)
		if err == nil && b.Connected && b.Converged {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to converge: %w (last status error: %w)", bridge, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (e *env) bridgeStatus(ctx context.Context) (*client.BridgeStatus, error) {
	st, err := e.d.c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	if b := findBridge(st.Bridges); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("status: no bridge %s", bridge)
}

func findBridge(bs []client.BridgeStatus) *client.BridgeStatus {
	for i := range bs {
		if bs[i].Name == bridge {
			return &bs[i]
		}
	}
	return nil
}

// freshStore removes the store and empties the bridge (when vswitchd runs),
// flowstated stopped: the next declare writes into nothing.
func (e *env) freshStore(ctx context.Context) error {
	if err := e.stopDaemon(); err != nil {
		return err
	}
	if err := os.Remove(e.dbPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove store: %w", err)
	}
	if e.sb.VswitchdPID() == 0 {
		return nil
	}
	_, err := e.sb.Ofctl(ctx, "del-flows", bridge)
	return err
}

// dump returns br-int's flows as ovs-ofctl prints them, sorted.
func (e *env) dump(ctx context.Context) ([]string, error) {
	return e.sb.DumpFlows(ctx, bridge)
}

// sameFlows fails loudly, with the first differences, when two dumps differ.
func sameFlows(aName string, a []string, bName string, b []string) error {
	if slices.Equal(a, b) {
		return nil
	}
	onlyA, onlyB := difference(a, b), difference(b, a)
	msg := fmt.Sprintf("flow tables differ: %s has %d flows, %s has %d; %d only in %s, %d only in %s",
		aName, len(a), bName, len(b), len(onlyA), aName, len(onlyB), bName)
	for i, l := range onlyA[:min(5, len(onlyA))] {
		msg += "\n  only in " + aName + " #" + strconv.Itoa(i+1) + ": " + l
	}
	for i, l := range onlyB[:min(5, len(onlyB))] {
		msg += "\n  only in " + bName + " #" + strconv.Itoa(i+1) + ": " + l
	}
	return errors.New(msg)
}

// difference is the lines of a not in b (both sorted).
func difference(a, b []string) []string {
	var out []string
	for _, l := range a {
		if _, found := slices.BinarySearch(b, l); !found {
			out = append(out, l)
		}
	}
	return out
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Size(), nil
}
