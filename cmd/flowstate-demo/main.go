// Command flowstate-demo plays the outage flowstate exists for, on a private
// Open vSwitch sandbox (no root, no kernel datapath): it starts ovsdb-server,
// ovs-vswitchd and flowstated, declares a conntrack pipeline, restarts
// ovs-vswitchd with flow-restore-wait, and shows the pipeline restored.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
)

// pipeline is the one from the outage report.
var pipeline = []string{
	"table=0,priority=100,ip,actions=ct(table=1,zone=65520)",
	"table=1,priority=100,ct_state=+inv+trk,ip,actions=drop",
	"table=1,priority=90,ip,actions=resubmit(,2)",
	"table=2,priority=100,ct_state=+new+trk,ip,actions=ct(commit,table=3,zone=65520)",
	"table=2,priority=90,ip,actions=resubmit(,3)",
	"table=3,priority=100,ip,actions=normal",
}

const bridge = "br-int"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "flowstate-demo:", err)
		cancel()
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func run(ctx context.Context) (err error) {
	step("starting a private Open vSwitch sandbox")
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sb.Close()) }()
	if err := sb.AddBridge(ctx, bridge); err != nil {
		return err
	}
	for i, p := range []string{"p1", "p2"} {
		if err := sb.AddPort(ctx, bridge, p, i+1); err != nil {
			return err
		}
	}
	fmt.Printf("    %s: bridge %s with dummy ports p1, p2\n", sb.Dir(), bridge)

	step("starting flowstated")
	if err := os.WriteFile(filepath.Join(sb.Dir(), "boot_id"), []byte("demo-boot\n"), 0o600); err != nil {
		return err
	}
	sock := "unix://" + filepath.Join(sb.Dir(), "flowstate.sock")
	logFile, err := os.Create(filepath.Join(sb.Dir(), "flowstated.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	d, err := server.Start(ctx, server.Config{
		Listen: sock, DBPath: filepath.Join(sb.Dir(), "flowstate.db"),
		BootIDFile: filepath.Join(sb.Dir(), "boot_id"),
		RunDir:     sb.RunDir(), OVSDB: sb.DBAddr(), Bridges: []string{bridge},
		Logger: slog.New(slog.NewTextHandler(logFile, nil)),
	})
	if err != nil {
		return fmt.Errorf("flowstated: %w", err)
	}
	defer func() { err = errors.Join(err, d.Stop()) }()
	fmt.Printf("    listening on %s, log in %s\n", sock, logFile.Name())
	c, err := client.New(sock)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := waitConverged(ctx, c); err != nil {
		return err
	}

	step("declaring the pipeline (module %q)", "pipeline")
	entries := make([]client.Entry, len(pipeline))
	for i, l := range pipeline {
		entries[i] = client.FlowText(l)
		fmt.Println("    " + l)
	}
	applied, err := c.Put(ctx, bridge, "pipeline", entries...)
	if err != nil {
		return err
	}
	fmt.Printf("    %d flows, applied to the switch: %v\n", len(entries), applied)

	step("restarting ovs-vswitchd with other_config:flow-restore-wait=true")
	start := time.Now()
	if err := sb.RestartVswitchd(ctx, true); err != nil {
		return err
	}
	up := time.Now()
	fmt.Printf("    vswitchd back after %v; it holds only the default flow and forwards nothing until flowstated is done\n", up.Sub(start).Round(time.Millisecond))
	if err := waitRestored(ctx, sb); err != nil {
		return err
	}
	restored := time.Now()
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if r := st.Bridges[0].LastReplay; !r.FinishedAt.IsZero() {
		fmt.Printf("    replay: %d messages, %d bytes in one bundle, %v\n", r.Messages, r.Bytes, r.Duration.Round(time.Microsecond))
	}
	fmt.Printf("    restored and flow-restore-wait cleared %v after vswitchd came back\n", restored.Sub(up).Round(time.Millisecond))

	step("flows on %s now (ovs-ofctl dump-flows)", bridge)
	flows, err := sb.DumpFlows(ctx, bridge)
	if err != nil {
		return err
	}
	for _, f := range flows {
		fmt.Println("    " + f)
	}

	step("injecting a TCP SYN on p1")
	_, tx0, err := sb.PortStats(ctx, bridge, "p2")
	if err != nil {
		return err
	}
	if err := sb.InjectSYN(ctx, bridge, "p1", sandbox.Packet{}); err != nil {
		return err
	}
	for {
		_, tx, err := sb.PortStats(ctx, bridge, "p2")
		if err != nil {
			return err
		}
		if tx > tx0 {
			fmt.Println("    forwarded to p2 through the restored conntrack pipeline")
			break
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("SYN not forwarded: %w", err)
		}
	}
	step("done")
	return nil
}

func waitConverged(ctx context.Context, c *client.Client) error {
	_, err := c.WaitConverged(ctx)
	return err
}

// waitRestored polls until the flag is cleared and the default NORMAL flow is
// gone.
func waitRestored(ctx context.Context, sb *sandbox.Sandbox) error {
	for {
		on, err := sb.FlowRestoreWait(ctx)
		if err == nil && !on {
			flows, err := sb.DumpFlows(ctx, bridge)
			if err == nil && len(flows) == len(pipeline) && !strings.Contains(strings.Join(flows, "\n"), "priority=0 actions=NORMAL") {
				return nil
			}
		}
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for the restore: %w", err)
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
