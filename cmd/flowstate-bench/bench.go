package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
)

const (
	bridge = "br-int"
	module = "bench"
	// stepTimeout bounds one wait (a restore, a convergence) so a stuck
	// daemon fails the run instead of hanging it until -timeout.
	stepTimeout = 5 * time.Minute
	// heartbeat is flowstated's idle event interval: the first heartbeat
	// tells a new Watch that its subscription is live.
	heartbeat = 50 * time.Millisecond
)

// result holds the samples of one flow count; the slices have one element
// per run, flowstate's and ovs-ofctl's of the same index measured back to
// back.
type result struct {
	flows int

	restore, declare, noop series
	// Breakdown of restore.fs: the server-side replay (store read, dump,
	// diff, bundle) and the flag's clear-and-acknowledge, both as flowstated
	// reports them.
	replay, flagAck []time.Duration
	// replayStart is when flowstated's replay_started event arrived,
	// relative to the management socket accepting (negative: flowstated's
	// redial won the race with the sandbox's readiness poll).
	replayStart    []time.Duration
	replayMessages uint32
	replayBytes    uint64

	heapBefore, heapAfterRestore, heapLive uint64
	// restoreAlloc is what this process allocated during the first restore
	// (flowstated's replay, plus the benchmark's few bytes).
	restoreAlloc uint64
	dbSize       int64
	status       time.Duration // one Status RPC after a restore
}

// env is one sandbox with br-int, the flow file and, while it runs, an
// in-process flowstated managing br-int.
type env struct {
	sb      *sandbox.Sandbox
	log     *slog.Logger
	cfg     server.Config
	d       *server.Daemon
	c       *client.Client
	file    string
	lines   []string
	entries []client.Entry
	batch   int
	logFile *os.File
}

// measure runs every measurement for n flows in a fresh sandbox.
func measure(ctx context.Context, o options, n int, log *slog.Logger) (_ *result, err error) {
	log = log.With("flows", n)
	lines, err := generateFlows(n)
	if err != nil {
		return nil, err
	}
	if err := checkFlows(lines); err != nil {
		return nil, err
	}
	log.Info("flows generated and checked by flowstate's parser")

	sbOpts := sandbox.Options{KeepDir: o.keep}
	if o.verbose {
		sbOpts.Logger = log.With("component", "sandbox")
	}
	sb, err := sandbox.Start(ctx, sbOpts)
	if err != nil {
		return nil, err
	}
	e := &env{sb: sb, log: log, lines: lines, batch: o.batch}
	defer func() { err = errors.Join(err, e.close()) }()
	if o.keep {
		log.Info("sandbox kept", "dir", sb.Dir())
	}
	if err := e.setup(ctx, o.verbose); err != nil {
		return nil, err
	}

	r := &result{flows: n}
	runtime.GC()
	r.heapBefore = heapInuse()

	// Declare first: it leaves flowstated running with the n flows stored
	// and on the switch, which the other measurements start from.
	for i := range o.runs {
		p, err := e.declarePair(ctx, i == 0)
		if err != nil {
			return nil, fmt.Errorf("declare, run %d: %w", i+1, err)
		}
		r.declare.add(p)
		log.Info("declare", "run", i+1, "flowstate", p.fs.wall, "ovs-ofctl", p.of.wall)
	}
	if r.dbSize, err = fileSize(e.cfg.DBPath); err != nil {
		return nil, err
	}
	for i := range o.runs {
		p, err := e.noopPair(ctx)
		if err != nil {
			return nil, fmt.Errorf("no-op reconcile, run %d: %w", i+1, err)
		}
		r.noop.add(p)
		log.Info("no-op reconcile", "run", i+1, "flowstate", p.fs.wall, "ovs-ofctl", p.of.wall)
	}
	for i := range o.runs {
		if err := e.restorePair(ctx, r, i == 0); err != nil {
			return nil, fmt.Errorf("restore, run %d: %w", i+1, err)
		}
		log.Info("restore", "run", i+1, "flowstate", r.restore.fs[i].wall, "ovs-ofctl", r.restore.of[i].wall,
			"replay", r.replay[i], "flag_ack", r.flagAck[i])
	}
	return r, nil
}

// setup adds the bridge and its ports, writes the flow file and the boot id,
// and prepares flowstated's configuration.
func (e *env) setup(ctx context.Context, verbose bool) error {
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
	dir := e.sb.Dir()
	e.file = filepath.Join(dir, "flows.txt")
	if err := os.WriteFile(e.file, []byte(flowFile(e.lines)), 0o600); err != nil {
		return fmt.Errorf("write flow file: %w", err)
	}
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("bench-boot\n"), 0o600); err != nil {
		return fmt.Errorf("write boot id: %w", err)
	}
	e.entries = make([]client.Entry, len(e.lines))
	for i, l := range e.lines {
		e.entries[i] = client.FlowText(l)
	}
	var logOut *os.File
	if verbose {
		logOut = os.Stderr
	} else {
		f, err := os.Create(filepath.Join(dir, "flowstated.log"))
		if err != nil {
			return fmt.Errorf("create flowstated log: %w", err)
		}
		e.logFile, logOut = f, f
	}
	e.cfg = server.Config{
		Listen:         "unix://" + filepath.Join(dir, "fs.sock"),
		DBPath:         filepath.Join(dir, "flowstate.db"),
		BootIDFile:     bootID,
		RunDir:         e.sb.RunDir(),
		OVSDB:          e.sb.DBAddr(),
		Bridges:        []string{bridge},
		EventHeartbeat: heartbeat,
		Logger:         slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo})),
		// Each declare run starts a fresh store on a bridge the previous
		// store managed: take it over rather than stand aside.
		TakeOver: true,
	}
	return nil
}

// close stops flowstated, closes its log and stops the sandbox, which
// removes the directory both lived in (unless -keep).
func (e *env) close() error {
	err := e.stopDaemon()
	if e.logFile != nil {
		err = errors.Join(err, e.logFile.Close())
	}
	return errors.Join(err, e.sb.Close())
}

// startDaemon starts flowstated and waits until br-int converged (its first
// replay after connecting).
func (e *env) startDaemon(ctx context.Context) error {
	d, err := server.Start(ctx, e.cfg)
	if err != nil {
		return fmt.Errorf("start flowstated: %w", err)
	}
	e.d = d
	if e.c, err = client.New(e.cfg.Listen); err != nil {
		return err
	}
	return e.waitConverged(ctx)
}

func (e *env) stopDaemon() error {
	var err error
	if e.c != nil {
		err = e.c.Close()
		e.c = nil
	}
	if e.d != nil {
		if serr := e.d.Stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("flowstated stopped with: %w", serr))
		}
		e.d = nil
	}
	return err
}

// waitConverged polls Status; only used outside timed sections (Status
// walks the whole store).
func (e *env) waitConverged(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	// Every Status call costs ~0.5 µs per stored flow; poll gently.
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := e.c.Status(ctx)
		if err == nil {
			if b := bridgeStatus(st); b != nil && b.Connected && b.Converged {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to converge: %w (last status error: %w)", bridge, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func bridgeStatus(st *client.Status) *client.BridgeStatus {
	for i := range st.Bridges {
		if st.Bridges[i].Name == bridge {
			return &st.Bridges[i]
		}
	}
	return nil
}

// declarePair measures ovs-ofctl --bundle add-flows into an empty bridge,
// then Puts of the same flows into a fresh flowstated on an empty bridge. It
// ends with flowstated running and the flows stored and installed.
func (e *env) declarePair(ctx context.Context, verify bool) (p pair, err error) {
	if err := e.stopDaemon(); err != nil {
		return p, err
	}
	if _, err := e.sb.Ofctl(ctx, "del-flows", bridge); err != nil {
		return p, err
	}
	m := startMeter(true, e.sb.VswitchdPID())
	if _, err := e.sb.Ofctl(ctx, "--bundle", "add-flows", bridge, e.file); err != nil {
		return p, err
	}
	p.of = m.stop()
	var want []string
	if verify {
		if want, err = e.dump(ctx); err != nil {
			return p, err
		}
	}

	// A fresh store and an empty bridge: the Puts are the first writes.
	if err := os.Remove(e.cfg.DBPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return p, fmt.Errorf("remove store: %w", err)
	}
	if _, err := e.sb.Ofctl(ctx, "del-flows", bridge); err != nil {
		return p, err
	}
	if err := e.startDaemon(ctx); err != nil {
		return p, err
	}
	m = startMeter(false, e.sb.VswitchdPID())
	for lo := 0; lo < len(e.entries); lo += e.batch {
		hi := min(lo+e.batch, len(e.entries))
		applied, err := e.c.Put(ctx, bridge, module, e.entries[lo:hi]...)
		if err != nil {
			return p, fmt.Errorf("put flows %d-%d: %w", lo+1, hi, err)
		}
		if !applied {
			return p, fmt.Errorf("put flows %d-%d: stored but not applied to the live bridge", lo+1, hi)
		}
	}
	p.fs = m.stop()
	if verify {
		got, err := e.dump(ctx)
		if err != nil {
			return p, err
		}
		if err := sameFlows("ovs-ofctl add-flows", want, "flowstate Put", got); err != nil {
			return p, err
		}
	}
	return p, nil
}

// noopPair measures a Reconcile with nothing to change, then ovs-ofctl
// replace-flows of the same file on the same, identical, bridge.
func (e *env) noopPair(ctx context.Context) (p pair, err error) {
	m := startMeter(false, e.sb.VswitchdPID())
	resp, err := e.c.Reconcile(ctx, bridge)
	if err != nil {
		return p, err
	}
	p.fs = m.stop()
	b := bridgeStatus(&client.Status{Bridges: resp})
	if b == nil || !b.Converged {
		return p, fmt.Errorf("reconcile: %s not converged: %+v", bridge, resp)
	}
	if n := b.LastReplay.Messages; n != 0 {
		return p, fmt.Errorf("reconcile sent %d messages to a bridge that already held the desired flows: "+
			"flowstate's canonical form differs from what OVS returns", n)
	}

	m = startMeter(true, e.sb.VswitchdPID())
	if _, err := e.sb.Ofctl(ctx, "--bundle", "replace-flows", bridge, e.file); err != nil {
		return p, err
	}
	p.of = m.stop()
	return p, nil
}

// restorePair restarts vswitchd with flow-restore-wait twice: once restored
// by the running flowstated, once (flowstated stopped) by ovs-ofctl and
// ovs-vsctl. Both must leave the same flow table. It ends with flowstated
// running and converged.
func (e *env) restorePair(ctx context.Context, r *result, first bool) error {
	fs, err := e.restoreFlowstate(ctx, r, first)
	if err != nil {
		return fmt.Errorf("flowstate: %w", err)
	}
	fsFlows, err := e.dump(ctx)
	if err != nil {
		return err
	}
	if len(fsFlows) != len(e.lines) {
		return fmt.Errorf("flowstate restored %d flows, want %d", len(fsFlows), len(e.lines))
	}

	if err := e.stopDaemon(); err != nil {
		return err
	}
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		return err
	}
	m := startMeter(true, e.sb.VswitchdPID())
	if _, err := e.sb.Ofctl(ctx, "--bundle", "replace-flows", bridge, e.file); err != nil {
		return err
	}
	// Without --no-wait: ovs-vsctl returns once vswitchd applied it.
	if _, err := e.sb.Vsctl(ctx, "remove", "Open_vSwitch", ".", "other_config", "flow-restore-wait"); err != nil {
		return err
	}
	of := m.stop()
	ofFlows, err := e.dump(ctx)
	if err != nil {
		return err
	}
	if err := sameFlows("flowstate restore", fsFlows, "ovs-ofctl restore", ofFlows); err != nil {
		return err
	}
	r.restore.add(pair{fs: fs, of: of})
	return e.startDaemon(ctx)
}

// restoreFlowstate restarts vswitchd with flow-restore-wait=true under the
// running flowstated and returns the time from vswitchd's management socket
// accepting to flowstated's flag_cleared event, which it publishes after
// vswitchd acknowledged the clear.
//
// The end is taken from the Watch stream rather than by polling Status:
// Status counts every stored entry, so polling it every few milliseconds
// would compete with the replay for the two CPUs. Status and OVSDB are
// checked once afterwards.
func (e *env) restoreFlowstate(ctx context.Context, r *result, first bool) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	w, err := e.watch(ctx)
	if err != nil {
		return sample{}, err
	}
	defer w.close()

	allocBefore := totalAlloc()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		return sample{}, err
	}
	m := startMeter(false, e.sb.VswitchdPID())
	var replayStart time.Duration
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				return sample{}, fmt.Errorf("watch ended before flow-restore-wait was cleared: %w", w.wait())
			}
			switch ev.typ {
			case "replay_started":
				replayStart = ev.received.Sub(m.start)
			case "replay_finished":
				if msg := ev.attrs["error"]; msg != "" {
					return sample{}, fmt.Errorf("replay failed: %s", msg)
				}
			case "flag_cleared":
				s := m.stop()
				// The end is when the event arrived, not when it was read.
				s.wall = ev.received.Sub(m.start)
				ack, err := time.ParseDuration(ev.attrs["ack"])
				if err != nil {
					return sample{}, fmt.Errorf("flag_cleared event: ack %q: %w", ev.attrs["ack"], err)
				}
				r.replayStart = append(r.replayStart, replayStart)
				if first {
					r.restoreAlloc = totalAlloc() - allocBefore
				}
				return s, e.afterRestore(ctx, r, s.wall, ack, first)
			}
		case <-ctx.Done():
			return sample{}, fmt.Errorf("waiting for flowstated to clear flow-restore-wait: %w", ctx.Err())
		}
	}
}

// afterRestore confirms the restore through Status and OVSDB and records
// the server-side figures (and, the first time, the heap).
func (e *env) afterRestore(ctx context.Context, r *result, total, ack time.Duration, first bool) error {
	if first {
		r.heapAfterRestore = heapInuse()
		runtime.GC()
		r.heapLive = heapInuse()
	}
	start := time.Now()
	st, err := e.c.Status(ctx)
	if err != nil {
		return err
	}
	if first {
		r.status = time.Since(start)
	}
	b := bridgeStatus(st)
	if b == nil || !b.Converged {
		return fmt.Errorf("flag cleared but %s not converged: %+v", bridge, st)
	}
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil {
		return err
	} else if on {
		return errors.New("flowstated reported flow-restore-wait cleared, OVSDB still holds it")
	}
	lr := b.LastReplay
	if lr.Error != "" {
		return fmt.Errorf("last replay failed: %s", lr.Error)
	}
	r.replay = append(r.replay, lr.Duration)
	r.flagAck = append(r.flagAck, ack)
	r.replayMessages, r.replayBytes = uint32(lr.Messages), uint64(lr.Bytes)
	e.log.Debug("restore", "total", total, "replay", lr.Duration, "ack", ack,
		"messages", lr.Messages, "bytes", lr.Bytes)
	return nil
}

// event is a Watch event with the time this process received it.
type event struct {
	typ      string
	attrs    map[string]string
	received time.Time
}

// watcher owns one Watch stream and the goroutine reading it.
type watcher struct {
	events chan event
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// watch subscribes to flowstated's events and returns once the subscription
// is live (its first event, normally a heartbeat, arrived), so no later
// event is missed. Later heartbeats are not forwarded.
func (e *env) watch(ctx context.Context) (*watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{events: make(chan event, 1024), cancel: cancel, done: make(chan struct{})}
	c := e.c
	go func() {
		defer close(w.done)
		defer close(w.events)
		live := false
		w.err = c.Watch(ctx, client.Cursor{}, func(ev client.Event) error {
			if live && ev.Type == client.EventHeartbeat {
				return nil
			}
			live = true
			select {
			case w.events <- event{typ: ev.TypeName, attrs: ev.Attrs, received: time.Now()}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	select {
	case _, ok := <-w.events:
		if !ok {
			cancel()
			return nil, fmt.Errorf("watch flowstated events: %w", w.wait())
		}
		return w, nil
	case <-time.After(100 * heartbeat):
		w.close()
		return nil, errors.New("watch flowstated events: no heartbeat")
	case <-ctx.Done():
		w.close()
		return nil, ctx.Err()
	}
}

// wait waits for the reading goroutine and returns its error.
func (w *watcher) wait() error {
	<-w.done
	return w.err
}

// close stops the stream and waits for the goroutine.
func (w *watcher) close() {
	w.cancel()
	<-w.done
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

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Size(), nil
}
