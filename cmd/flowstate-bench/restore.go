package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// idleWait is how long flowstated sits idle after a restore before its
// idle memory is read.
const idleWait = 2 * time.Second

// restoreRun is one run of the restore cycle.
type restoreRun struct {
	running sample // flowstated running, vswitchd restarted under the flag
	ofctl   sample // ovs-ofctl replace-flows + ovs-vsctl remove, fresh vswitchd
	startup sample // flowstated started beside a held, empty vswitchd
	serving time.Duration
	idle    procStatus // flowstated idleWait after the start-up replay
	// The running restore's breakdown, as flowstated reports it.
	replay, flagAck time.Duration
}

// restoreRun restarts vswitchd with flow-restore-wait three times: under
// the running flowstated; with flowstated stopped, restored by ovs-ofctl and
// ovs-vsctl; and with flowstated stopped, which then starts with the flows
// stored and replays them all. All three must leave the same flow table.
// It starts and ends with flowstated running and converged.
func (e *env) restoreRun(ctx context.Context) (r restoreRun, err error) {
	if r.running, r.replay, r.flagAck, err = e.restoreRunning(ctx); err != nil {
		return r, fmt.Errorf("flowstate, running: %w", err)
	}
	fsFlows, err := e.dump(ctx)
	if err != nil {
		return r, err
	}
	if len(fsFlows) != len(e.lines) {
		return r, fmt.Errorf("flowstate restored %d flows, want %d", len(fsFlows), len(e.lines))
	}

	if err := e.stopDaemon(); err != nil {
		return r, err
	}
	if r.ofctl, err = e.restoreOfctl(ctx); err != nil {
		return r, fmt.Errorf("ovs-ofctl: %w", err)
	}
	if err := e.sameAs(ctx, "flowstate restore", fsFlows, "ovs-ofctl restore"); err != nil {
		return r, err
	}

	if r.startup, r.serving, err = e.restoreStartup(ctx); err != nil {
		return r, fmt.Errorf("flowstate, start-up: %w", err)
	}
	if err := e.sameAs(ctx, "flowstate restore", fsFlows, "flowstate start-up replay"); err != nil {
		return r, err
	}
	select {
	case <-time.After(idleWait):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	if r.idle, err = readProcStatus(e.d.pid()); err != nil {
		return r, err
	}
	return r, nil
}

// restoreRunning restarts vswitchd with flow-restore-wait=true under the
// running flowstated. The clock runs from vswitchd's management socket
// accepting to the flag_cleared event, which flowstated publishes after
// vswitchd acknowledged the clear (its time is flowstated's); forwarding is
// when the OVSDB monitor saw vswitchd apply it. flowstated's CPU and memory
// also cover the restart itself (it may start replaying before the
// sandbox's readiness poll returns).
func (e *env) restoreRunning(ctx context.Context) (s sample, replay, ack time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	w, err := watch(ctx, e.d.c, client.Cursor{})
	if err != nil {
		return s, 0, 0, err
	}
	defer w.close()
	mon, err := startReleaseMonitor(ctx, e.sb)
	if err != nil {
		return s, 0, 0, err
	}
	defer mon.close()

	m := newMeter(driverNone)
	if err := m.flowstated(e.d.pid(), false); err != nil {
		return s, 0, 0, err
	}
	defer m.abort()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		return s, 0, 0, err
	}
	m.vswitchd(e.sb.VswitchdPID())
	m.begin()
	ev, err := w.next(ctx, client.EventFlagCleared)
	if err != nil {
		return s, 0, 0, err
	}
	fwd, err := mon.wait(ctx)
	if err != nil {
		return s, 0, 0, err
	}
	s = m.stop()
	s.wall, s.forwarding = sinceStart(m, ev.Time), sinceStart(m, fwd)
	if ack, err = time.ParseDuration(ev.Attrs["ack"]); err != nil {
		return s, 0, 0, fmt.Errorf("flag_cleared event: ack %q: %w", ev.Attrs["ack"], err)
	}
	replay, err = e.checkRestored(ctx)
	return s, replay, ack, err
}

// checkRestored confirms a restore through Status and OVSDB and returns the
// replay's duration as flowstated reports it.
func (e *env) checkRestored(ctx context.Context) (time.Duration, error) {
	b, err := e.bridgeStatus(ctx)
	if err != nil {
		return 0, err
	}
	if !b.Converged {
		return 0, fmt.Errorf("flag cleared but %s not converged: %+v", bridge, b)
	}
	if b.LastReplay.Error != "" {
		return 0, fmt.Errorf("last replay failed: %s", b.LastReplay.Error)
	}
	if on, err := e.sb.FlowRestoreWait(ctx); err != nil {
		return 0, err
	} else if on {
		return 0, errors.New("flowstated reported flow-restore-wait cleared, OVSDB still holds it")
	}
	return b.LastReplay.Duration, nil
}

// restoreOfctl is what a shell restorer does, flowstated stopped: restart
// vswitchd under the flag, then `ovs-ofctl --bundle replace-flows` and
// `ovs-vsctl remove Open_vSwitch . other_config flow-restore-wait` (without
// --no-wait: it returns once vswitchd applied it).
func (e *env) restoreOfctl(ctx context.Context) (sample, error) {
	mon, err := startReleaseMonitor(ctx, e.sb)
	if err != nil {
		return sample{}, err
	}
	defer mon.close()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		return sample{}, err
	}
	m := newMeter(driverChildren)
	m.vswitchd(e.sb.VswitchdPID())
	if _, err := e.sb.Ofctl(ctx, "--bundle", "replace-flows", bridge, e.file); err != nil {
		return sample{}, err
	}
	if _, err := e.sb.Vsctl(ctx, "remove", "Open_vSwitch", ".", "other_config", "flow-restore-wait"); err != nil {
		return sample{}, err
	}
	s := m.stop()
	fwd, err := mon.wait(ctx)
	if err != nil {
		return s, err
	}
	s.forwarding = fwd.Sub(m.start)
	return s, nil
}

// restoreStartup restarts vswitchd under the flag with flowstated stopped
// (it comes back empty and held), then starts flowstated with the flows
// stored. The clock runs from flowstated's exec to its flag_cleared event;
// serving is when its API socket first accepted. It leaves flowstated
// running.
func (e *env) restoreStartup(ctx context.Context) (s sample, serving time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := e.sb.RestartVswitchd(ctx, true); err != nil {
		return s, 0, err
	}
	mon, err := startReleaseMonitor(ctx, e.sb)
	if err != nil {
		return s, 0, err
	}
	defer mon.close()
	m := newMeter(driverNone)
	m.vswitchd(e.sb.VswitchdPID())
	if err := e.startDaemon(ctx, "startup"); err != nil {
		return s, 0, err
	}
	m.start = e.d.started
	if err := m.flowstated(e.d.pid(), true); err != nil {
		return s, 0, err
	}
	defer m.abort()
	serving = e.d.serving.Sub(e.d.started)
	// The zero cursor learns the stream; the events from its revision 1
	// on are retained, so the second Watch sees flag_cleared even if it
	// came before the first was live.
	w, err := watch(ctx, e.d.c, client.Cursor{})
	if err != nil {
		return s, 0, err
	}
	stream := w.first.StreamID
	w.close()
	if w, err = watch(ctx, e.d.c, client.Cursor{StreamID: stream, Revision: 1}); err != nil {
		return s, 0, err
	}
	defer w.close()
	ev, err := w.next(ctx, client.EventFlagCleared)
	if err != nil {
		return s, 0, err
	}
	fwd, err := mon.wait(ctx)
	if err != nil {
		return s, 0, err
	}
	s = m.stop()
	s.wall, s.forwarding = sinceStart(m, ev.Time), sinceStart(m, fwd)
	_, err = e.checkRestored(ctx)
	return s, serving, err
}

// sinceStart is t on m's clock. A restore of a few flows may end before the
// bench sees vswitchd's management socket accept, when the clock starts: it
// took no time after that start, not a negative one.
func sinceStart(m *meter, t time.Time) time.Duration { return max(0, t.Sub(m.start)) }
