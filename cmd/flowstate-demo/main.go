// Command flowstate-demo plays the outage flowstate exists for, on a private
// Open vSwitch sandbox (no root, no kernel datapath), twice. First without
// flowstate: a controller programs a conntrack pipeline with a policy that
// denies one address, ovs-vswitchd restarts, and until the controller has
// reinstalled its flows the bridge forwards with its default NORMAL flow; the
// demo counts the SYNs to the denied address that leak out. Then with
// flowstated: ovs-vswitchd restarts with flow-restore-wait, flowstated puts
// the pipeline back in one bundle, and no SYN leaks.
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
	"sync"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
)

// denied is the address the policy drops.
const denied = "10.0.0.66"

// pipeline is the one from the outage report, with a network policy that
// denies one address.
var pipeline = []string{
	"table=0,priority=100,ip,actions=ct(table=1,zone=65520)",
	"table=1,priority=100,ct_state=+inv+trk,ip,actions=drop",
	"table=1,priority=90,ip,actions=resubmit(,2)",
	"table=2,priority=100,ct_state=+new+trk,ip,actions=ct(commit,table=3,zone=65520)",
	"table=2,priority=90,ip,actions=resubmit(,3)",
	"table=3,priority=200,ip,nw_dst=" + denied + ",actions=drop",
	"table=3,priority=100,ip,actions=normal",
}

const bridge = "br-int"

// controllerDelay is how long the controller of the first act takes to
// notice the restart and reinstall its flows; real ones take seconds.
const controllerDelay = time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "flowstate-demo:", err)
		cancel()
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// result is what the two acts measured.
type result struct {
	// Sent and Leaked count the SYNs to the denied address injected during
	// each restart and those forwarded to p2: without and with flowstate.
	SentPlain, LeakedPlain         int
	SentFlowstate, LeakedFlowstate int
	// Replay is flowstated's replay after the restart.
	Replay client.Replay
}

func run(ctx context.Context) (res result, err error) {
	step("starting a private Open vSwitch sandbox")
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, sb.Close()) }()
	if err := sb.AddBridge(ctx, bridge); err != nil {
		return res, err
	}
	for i, p := range []string{"p1", "p2"} {
		if err := sb.AddPort(ctx, bridge, p, i+1); err != nil {
			return res, err
		}
	}
	fmt.Printf("    %s: bridge %s with dummy ports p1, p2; the policy denies %s\n", sb.Dir(), bridge, denied)
	for _, l := range pipeline {
		fmt.Println("    " + l)
	}
	if res.SentPlain, res.LeakedPlain, err = withoutFlowstate(ctx, sb); err != nil {
		return res, err
	}
	if err := withFlowstate(ctx, sb, &res); err != nil {
		return res, err
	}
	step("done: %d SYNs to %s leaked without flowstate, %d with it", res.LeakedPlain, denied, res.LeakedFlowstate)
	return res, nil
}

// withoutFlowstate is the first act: a controller programs the switch with
// ovs-ofctl, vswitchd restarts plainly, and the controller reinstalls its
// flows controllerDelay after vswitchd is back.
func withoutFlowstate(ctx context.Context, sb *sandbox.Sandbox) (sent, leaked int, err error) {
	step("WITHOUT flowstate: a controller installs the pipeline with ovs-ofctl add-flows")
	file := filepath.Join(sb.Dir(), "pipeline.flows")
	if err := os.WriteFile(file, []byte(strings.Join(pipeline, "\n")+"\n"), 0o600); err != nil {
		return 0, 0, err
	}
	if out, err := sb.Ofctl(ctx, "add-flows", bridge, file); err != nil {
		return 0, 0, fmt.Errorf("%w: %s", err, out)
	}
	step("restarting ovs-vswitchd (plain restart) while SYNs to %s arrive on p1", denied)
	inj := startInjector(ctx, sb)
	start := time.Now()
	if err := sb.RestartVswitchd(ctx, false); err != nil {
		inj.stop()
		return 0, 0, err
	}
	up := time.Now()
	fmt.Printf("    vswitchd back after %v with empty tables and the default NORMAL flow\n", up.Sub(start).Round(time.Millisecond))
	if err := pause(ctx, controllerDelay); err != nil {
		inj.stop()
		return 0, 0, err
	}
	out, err := sb.Ofctl(ctx, "add-flows", bridge, file)
	sent = inj.stop()
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s", err, out)
	}
	// Port counters restart with vswitchd: all of p2's are leaks.
	_, tx, err := sb.PortStats(ctx, bridge, "p2")
	if err != nil {
		return 0, 0, err
	}
	fmt.Printf("    the controller reinstalled its flows %v after vswitchd came back\n", time.Since(up).Round(time.Millisecond))
	fmt.Printf("    LEAKED: %d of %d SYNs to %s were forwarded to p2 by the NORMAL flow\n", tx, sent, denied)
	return sent, int(tx), nil
}

// withFlowstate is the second act: flowstated holds the pipeline and puts it
// back while vswitchd waits with flow-restore-wait.
func withFlowstate(ctx context.Context, sb *sandbox.Sandbox, res *result) (err error) {
	step("WITH flowstate: starting flowstated, the controller declares the pipeline through it")
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
		// The bridge holds the first act's flows, which this new store
		// never declared: take it over rather than stand aside.
		TakeOver: true,
		Logger:   slog.New(slog.NewTextHandler(logFile, nil)),
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
	entries := make([]client.Entry, len(pipeline))
	for i, l := range pipeline {
		entries[i] = client.FlowText(l)
	}
	if _, err := c.Put(ctx, client.Module{Bridge: bridge, Name: "pipeline"}, entries...); err != nil {
		return err
	}
	if _, err := c.WaitConverged(ctx); err != nil {
		return err
	}

	step("restarting ovs-vswitchd with other_config:flow-restore-wait=true while SYNs to %s arrive on p1", denied)
	inj := startInjector(ctx, sb)
	start := time.Now()
	if err := sb.RestartVswitchd(ctx, true); err != nil {
		inj.stop()
		return err
	}
	up := time.Now()
	fmt.Printf("    vswitchd back after %v; it forwards nothing until flowstated is done\n", up.Sub(start).Round(time.Millisecond))
	err = waitRestored(ctx, sb)
	restored := time.Now()
	if err == nil {
		// The same window as without flowstate, for a fair count.
		err = pause(ctx, time.Until(up.Add(controllerDelay)))
	}
	res.SentFlowstate = inj.stop()
	if err != nil {
		return err
	}
	_, tx, err := sb.PortStats(ctx, bridge, "p2")
	if err != nil {
		return err
	}
	res.LeakedFlowstate = int(tx)
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	res.Replay = st.Bridges[0].LastReplay
	r := res.Replay
	fmt.Printf("    flowstated replayed %d flows: %d messages, %d bytes in one bundle, in %v\n", r.Entries, r.Messages, r.Bytes,
		r.Duration.Round(time.Microsecond))
	fmt.Printf("    pipeline back and flow-restore-wait cleared %v after vswitchd came back\n", restored.Sub(up).Round(time.Millisecond))
	fmt.Printf("    leaked: %d of %d SYNs to %s sent in the same %v after vswitchd came back\n", res.LeakedFlowstate,
		res.SentFlowstate, denied, controllerDelay)

	step("flows on %s now (ovs-ofctl dump-flows)", bridge)
	flows, err := sb.DumpFlows(ctx, bridge)
	if err != nil {
		return err
	}
	for _, f := range flows {
		fmt.Println("    " + f)
	}
	step("a TCP SYN to an allowed address on p1")
	if err := forwarded(ctx, sb); err != nil {
		return err
	}
	fmt.Println("    forwarded to p2 through the restored conntrack pipeline")
	return nil
}

// injector sends SYNs to the denied address on p1 until stopped.
type injector struct {
	done chan struct{}
	wg   sync.WaitGroup
	sent int
}

// startInjector injects SYNs in a loop; while vswitchd is down the attempts
// fail and are not counted. stop ends it and returns the SYNs vswitchd took.
func startInjector(ctx context.Context, sb *sandbox.Sandbox) *injector {
	inj := &injector{done: make(chan struct{})}
	inj.wg.Go(func() {
		for {
			select {
			case <-inj.done:
				return
			case <-ctx.Done():
				return
			default:
			}
			if err := sb.InjectSYN(ctx, bridge, "p1", sandbox.Packet{DstIP: denied}); err == nil {
				inj.sent++
			} else if pause(ctx, 5*time.Millisecond) != nil {
				return
			}
		}
	})
	return inj
}

func (inj *injector) stop() int {
	close(inj.done)
	inj.wg.Wait()
	return inj.sent
}

// forwarded injects a SYN to an allowed address and waits until p2 sent it.
func forwarded(ctx context.Context, sb *sandbox.Sandbox) error {
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
			return nil
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("SYN not forwarded: %w", err)
		}
	}
}

// waitRestored polls until the flag is cleared and the switch holds exactly
// the pipeline (the default NORMAL flow gone).
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
