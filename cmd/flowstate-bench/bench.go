package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// result holds the samples of one flow count; the slices have one element
// per run, flowstate's and ovs-ofctl's of the same index measured back to
// back.
type result struct {
	flows int

	// restore: flowstated running; startup: flowstated started beside the
	// held vswitchd. Both are paired with the same ovs-ofctl runs.
	restore, startup series
	serving          []time.Duration // flowstated's exec to its socket accepting
	replay, flagAck  []time.Duration // restore's breakdown, as flowstated reports it
	idle             []procStatus

	// declareFlowctl and declareClient are paired with the same ovs-ofctl
	// add-flows runs.
	declareFlowctl, declareClient series
	flowctlMaxRSS                 []uint64
	// The same declares with vswitchd down: stored only, nothing to
	// compare with (ovs-ofctl needs the switch).
	offFlowctl, offClient []sample
	noop                  series
	// sync is flowctl replace-flows of half the flows, paired with
	// ovs-ofctl replace-flows of the same.
	sync series

	dbSize int64
}

// measure runs every measurement for n flows in a fresh sandbox.
func measure(ctx context.Context, o options, bins binaries, n int, log *slog.Logger) (_ *result, err error) {
	log = log.With("flows", n)
	lines, err := generateFlows(n)
	if err != nil {
		return nil, err
	}
	encoded, err := encodeFlows(lines)
	if err != nil {
		return nil, err
	}
	entries := make([]client.Entry, len(encoded))
	for i, b := range encoded {
		entries[i] = client.FlowBytes(b)
	}
	log.Info("flows generated, parsed and encoded by flowstate's parser")

	sbOpts := sandbox.Options{KeepDir: o.keep}
	if o.verbose {
		sbOpts.Logger = log.With("component", "sandbox")
	}
	sb, err := sandbox.Start(ctx, sbOpts)
	if err != nil {
		return nil, err
	}
	e := &env{o: o, bins: bins, sb: sb, log: log, dir: sb.Dir(), lines: lines, encoded: entries, flows: n}
	defer func() { err = errors.Join(err, e.close()) }()
	if o.keep {
		log.Info("sandbox kept", "dir", sb.Dir())
	}
	if err := e.setup(ctx); err != nil {
		return nil, err
	}

	r := &result{flows: n}
	// Declare first: it leaves flowstated running with the n flows stored
	// and on the switch, which the other measurements start from.
	for i := range o.runs {
		d, err := e.declareRun(ctx, i == 0)
		if err != nil {
			return nil, fmt.Errorf("declare, run %d: %w", i+1, err)
		}
		r.declareFlowctl.add(d.flowctl, d.of)
		r.declareClient.add(d.goClient, d.of)
		r.flowctlMaxRSS = append(r.flowctlMaxRSS, d.flowctlMaxRSS)
		log.Info("declare", "run", i+1, "flowctl", d.flowctl.wall, "client", d.goClient.wall, "ovs-ofctl", d.of.wall)
	}
	if r.dbSize, err = fileSize(e.dbPath()); err != nil {
		return nil, err
	}
	for i := range o.runs {
		fc, gc, err := e.declareDisconnected(ctx)
		if err != nil {
			return nil, fmt.Errorf("declare with vswitchd down, run %d: %w", i+1, err)
		}
		r.offFlowctl, r.offClient = append(r.offFlowctl, fc), append(r.offClient, gc)
		log.Info("declare with vswitchd down", "run", i+1, "flowctl", fc.wall, "client", gc.wall)
	}
	// vswitchd back, empty: the Go client's flowstated replays the flows
	// into it, as after a restart.
	if err := e.sb.StartVswitchd(ctx); err != nil {
		return nil, err
	}
	if err := e.waitConverged(ctx); err != nil {
		return nil, err
	}
	// A new flowstated for the rest, with the flows stored and on the
	// switch: its profile then holds reconciles and restores only.
	if err := e.stopDaemon(); err != nil {
		return nil, err
	}
	if err := e.startConverged(ctx, "reconcile-restore"); err != nil {
		return nil, err
	}
	for i := range o.runs {
		fs, of, err := e.noopRun(ctx)
		if err != nil {
			return nil, fmt.Errorf("no-op reconcile, run %d: %w", i+1, err)
		}
		r.noop.add(fs, of)
		log.Info("no-op reconcile", "run", i+1, "flowstate", fs.wall, "ovs-ofctl", of.wall)
	}
	for i := range o.runs {
		rr, err := e.restoreRun(ctx)
		if err != nil {
			return nil, fmt.Errorf("restore, run %d: %w", i+1, err)
		}
		r.restore.add(rr.running, rr.ofctl)
		r.startup.add(rr.startup, rr.ofctl)
		r.serving = append(r.serving, rr.serving)
		r.replay, r.flagAck = append(r.replay, rr.replay), append(r.flagAck, rr.flagAck)
		r.idle = append(r.idle, rr.idle)
		log.Info("restore", "run", i+1, "flowstate", rr.running.wall, "start-up", rr.startup.wall,
			"ovs-ofctl", rr.ofctl.wall, "replay", rr.replay, "flag_ack", rr.flagAck)
	}
	// Last, in the last start-up's flowstated: the heap a large Sync
	// leaves behind stays out of the restore and idle figures.
	for i := range o.runs {
		fs, of, err := e.syncRun(ctx)
		if err != nil {
			return nil, fmt.Errorf("replace-flows, run %d: %w", i+1, err)
		}
		r.sync.add(fs, of)
		log.Info("replace-flows", "run", i+1, "flowstate", fs.wall, "ovs-ofctl", of.wall)
	}
	return r, nil
}
