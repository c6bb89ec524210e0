package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/flowstate-io/flowstate/client"
)

// declareRun is one run of the declare measurement: ovs-ofctl and the two
// flowstate clients, back to back.
type declareRun struct {
	of, flowctl, goClient sample
	flowctlMaxRSS         uint64 // bytes
}

// declareRun measures, each into an empty live bridge: one `ovs-ofctl
// --bundle add-flows` of the file; `flowctl add-flows` of the file into a
// fresh flowstated and store; and the Go client's concurrent Puts of the
// encoded flows into another fresh flowstated and store. It ends with
// flowstated running, the flows stored and installed. verify checks that
// all three leave the same flow table.
func (e *env) declareRun(ctx context.Context, verify bool) (r declareRun, err error) {
	if err := e.freshStore(ctx); err != nil {
		return r, err
	}
	m := newMeter(driverChildren)
	m.vswitchd(e.sb.VswitchdPID())
	if _, err := e.sb.Ofctl(ctx, "--bundle", "add-flows", bridge, e.file); err != nil {
		return r, err
	}
	r.of = m.stop()
	var want []string
	if verify {
		if want, err = e.dump(ctx); err != nil {
			return r, err
		}
	}

	if r.flowctl, r.flowctlMaxRSS, err = e.declareFlowctl(ctx, true); err != nil {
		return r, fmt.Errorf("flowctl add-flows: %w", err)
	}
	if verify && !r.flowctl.stopped {
		if err := e.sameAs(ctx, "ovs-ofctl add-flows", want, "flowctl add-flows"); err != nil {
			return r, err
		}
	}
	if r.goClient, err = e.declareGoClient(ctx, true); err != nil {
		return r, fmt.Errorf("declare through the Go client: %w", err)
	}
	if r.goClient.stopped {
		return r, fmt.Errorf("declare through the Go client: not done after -declare-timeout %v: "+
			"the other measurements need the flows stored", e.o.declareMax)
	}
	if verify {
		if err := e.sameAs(ctx, "ovs-ofctl add-flows", want, "Go client Puts"); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (e *env) sameAs(ctx context.Context, wantName string, want []string, name string) error {
	got, err := e.dump(ctx)
	if err != nil {
		return err
	}
	return sameFlows(wantName, want, name, got)
}

// declareFlowctl runs the real flowctl binary on the whole file, one
// command, into a fresh store: applied to the live bridge, or, unless live,
// stored while vswitchd is down.
func (e *env) declareFlowctl(ctx context.Context, live bool) (s sample, maxRSS uint64, err error) {
	if err := e.startFresh(ctx, "declare-flowctl", live); err != nil {
		return s, 0, err
	}
	m := newMeter(driverChildren)
	if err := m.flowstated(e.d.pid(), false); err != nil {
		return s, 0, err
	}
	if live {
		m.vswitchd(e.sb.VswitchdPID())
	}
	m.begin()
	cmd := exec.CommandContext(ctx, e.bins.flowctl, "--server", e.sock(), "--bridge", bridge,
		"--timeout", e.o.declareMax.String(), "add-flows", "--module", module, e.file)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return s, 0, err
	}
	// flowctl's VmHWM, sampled while it runs: the rusage of a child counts
	// the memory of this process it was forked from (before its exec).
	ms, serr := startMemSampler(cmd.Process.Pid, false)
	err = cmd.Wait()
	out := buf.Bytes()
	s = m.stop()
	if serr == nil {
		maxRSS = ms.finish().hwm
	}
	if err != nil && s.wall >= e.o.declareMax {
		// flowctl gave up at its --timeout; flowstated may still be at
		// work on the request, which is abandoned.
		e.log.Warn("flowctl add-flows stopped at -declare-timeout", "after", s.wall, "output", string(out))
		s.stopped = true
		e.killDaemon()
		return s, maxRSS, nil
	}
	if err != nil {
		return s, maxRSS, fmt.Errorf("%w: %s", err, out)
	}
	if applied := strings.Contains(string(out), "applied"); applied != live {
		return s, maxRSS, fmt.Errorf("applied to the bridge: %v, want %v: %s", applied, live, out)
	}
	return s, maxRSS, nil
}

// startFresh starts flowstated on a fresh store, and waits until the bridge
// converged when live; otherwise (vswitchd down) only until it serves.
func (e *env) startFresh(ctx context.Context, phase string, live bool) error {
	if err := e.freshStore(ctx); err != nil {
		return err
	}
	if !live {
		return e.startDaemon(ctx, phase+"-disconnected")
	}
	return e.startConverged(ctx, phase)
}

// declareGoClient sends the pre-encoded flows (FLOW_MODs of OpenFlow 1.5,
// client.FlowBytes) through the Go client from e.o.writers goroutines, each
// Put holding e.o.batch flows, into a fresh store, applied to the live
// bridge or, unless live, stored while vswitchd is down; it leaves
// flowstated running.
func (e *env) declareGoClient(ctx context.Context, live bool) (sample, error) {
	if err := e.startFresh(ctx, "declare-client", live); err != nil {
		return sample{}, err
	}
	m := newMeter(driverSelf)
	if err := m.flowstated(e.d.pid(), false); err != nil {
		return sample{}, err
	}
	if live {
		m.vswitchd(e.sb.VswitchdPID())
	}
	m.begin()
	pctx, cancel := context.WithTimeout(ctx, e.o.declareMax)
	defer cancel()
	err := putConcurrently(pctx, e.d.c, e.encoded, e.o.batch, e.o.writers, live)
	s := m.stop()
	if err != nil && errors.Is(pctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		s.stopped = true
		return s, nil
	}
	return s, err
}

// putConcurrently has writers goroutines take the next batch of entries
// until none is left; it returns when all have ended, with the first error
// (which stops the others). Every Put must be applied to the bridge, or
// stored without, as live says.
func putConcurrently(ctx context.Context, c *client.Client, es []client.Entry, batch, writers int, live bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(atomic.AddInt64(&next, int64(batch))) - batch
				if lo >= len(es) || ctx.Err() != nil {
					return
				}
				hi := min(lo+batch, len(es))
				applied, err := c.Put(ctx, client.Module{Bridge: bridge, Name: module}, es[lo:hi]...)
				if err == nil && applied != live {
					err = fmt.Errorf("applied to the bridge: %v, want %v", applied, live)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("put flows %d-%d: %w", lo+1, hi, err))
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// declareDisconnected measures both flowstate declares with vswitchd down:
// what a controller pays to declare while the switch restarts, the store's
// own rate. It stops vswitchd first and leaves it stopped, with flowstated
// running and the flows stored (the Go client's run last).
func (e *env) declareDisconnected(ctx context.Context) (flowctl, goClient sample, err error) {
	if err := e.stopDaemon(); err != nil {
		return flowctl, goClient, err
	}
	if e.sb.VswitchdPID() > 0 {
		if err := e.sb.StopVswitchd(ctx); err != nil {
			return flowctl, goClient, err
		}
	}
	if flowctl, _, err = e.declareFlowctl(ctx, false); err != nil {
		return flowctl, goClient, fmt.Errorf("flowctl add-flows: %w", err)
	}
	if goClient, err = e.declareGoClient(ctx, false); err != nil {
		return flowctl, goClient, fmt.Errorf("declare through the Go client: %w", err)
	}
	return flowctl, goClient, nil
}
