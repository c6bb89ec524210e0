package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// The controller's path to its bridge. The proxy is a proxied controller's
// only path to br-int, so while flowstated is away its guard relays the
// proxy's socket straight to vswitchd (server/guard/relay.go). The path
// check dials that socket as the controller would, writes one flow of a
// table of its own (pathTable), waits for the barrier reply and looks for
// the flow on the switch: while flowstated is dead past the guard's grace,
// vswitchd runs and the guard runs unfrozen, that must work within
// pathBound of the moment it became possible.

// pathTable is the path check's own table on br-int: no module declares it,
// so flowstated deletes its flows as drift once it is back (the relay does
// not record), and none of the policy's flows goes to it.
const pathTable = 31

// pathBound is how long after the relay became due (the guard's grace after
// flowstated died, or vswitchd's start, or the end of an excused window) a
// controller must have got its barrier reply through the proxy socket and
// find its flow on the switch: the guard's lease poll (Grace/10), a dial,
// a handshake and a barrier, and slack for a loaded two-core machine.
const pathBound = 6 * time.Second

// guardRespawn is how long flowstated may take to spawn a guard again
// after the harness killed one.
const guardRespawn = 5 * time.Second

// relaySlack is how long after the lease changed again the guard may still
// relay: its poll of the lease, and slack.
const relaySlack = 2 * time.Second

// leaseLoop follows the lease's content, as the guard does, so the harness
// knows when the guard may be relaying: from a lease silent for a while
// (less than the grace: the harness sees a change late under load) until
// relaySlack after it changes again.
func (r *run) leaseLoop(ctx context.Context) {
	var last []byte
	for sleepCtx(ctx, 100*time.Millisecond) {
		b, err := os.ReadFile(r.n.lease)
		now := time.Now()
		r.mu.Lock()
		if err == nil && !bytes.Equal(b, last) {
			last = b
			if r.leaseQuiet {
				r.relayEnd = now.Add(relaySlack)
			}
			r.leaseChanged, r.leaseQuiet = now, false
		}
		// A renewal every Grace/5: half the grace silent is a stall.
		if now.Sub(r.leaseChanged) > guardGrace/2 {
			r.leaseQuiet = true
		}
		r.mu.Unlock()
	}
}

// mayRelay reports whether a controller's connection to the proxy socket
// made now may be the guard's relay rather than flowstated's proxy: its
// writes would then not be recorded. flowstated not running (dead or
// frozen), the lease silent, or the guard perhaps still relaying.
func (r *run) mayRelay() bool {
	if r.n.noRelay {
		return false
	}
	if !r.n.alive() {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leaseQuiet || time.Now().Before(r.relayEnd)
}

// pathDue reports since when the relay must carry the controller, or zero
// with why not: flowstated dead past the guard's grace, vswitchd running
// unfrozen, a guard with the relay's sockets running unfrozen, and no
// lasting fault that takes br-int's OpenFlow 1.5 away (a protocols flip,
// br-int deleted) or hands the lock to a guard without relays.
func (r *run) pathDue() (time.Time, string) {
	if r.n.noRelay {
		return time.Time{}, "flowstated runs without the guard's relay"
	}
	dead := r.n.deadSince()
	if dead.IsZero() {
		return time.Time{}, "flowstated runs"
	}
	if r.n.stoppedGracefully() {
		return time.Time{}, "flowstated was stopped: its guard stops too"
	}
	from := dead.Add(guardGrace)
	if time.Now().Before(from) {
		return time.Time{}, "within the guard's grace"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.guardAtDeath:
		return time.Time{}, "no guard ran when flowstated died"
	case !r.guardKilledAt.IsZero() && r.guardKilledAt.After(dead.Add(-guardRespawn)):
		// A guard that exits by itself while flowstated is away is the
		// fault; one the harness killed is not.
		return time.Time{}, "the guard was killed"

	case r.vsDown || r.vsFrozen:
		return time.Time{}, "vswitchd down or frozen"
	case !r.guardFrozenAt.IsZero():
		return time.Time{}, "guard frozen"
	case r.running[ProtocolsFlip] || r.running[ManagedRecreate] || r.running[ReadonlyGuard]:
		return time.Time{}, "a lasting fault takes the relay's bridge or guard away"
	}
	return from, ""
}

// pathLoop checks the path twice a second.
func (r *run) pathLoop(ctx context.Context) {
	var window time.Time // when the relay became due; zero while it is not
	var warned bool
	var seq int
	for sleepCtx(ctx, 500*time.Millisecond) {
		from, _ := r.pathDue()
		if from.IsZero() {
			window, warned = time.Time{}, false
			continue
		}
		if window.IsZero() {
			window = time.Now()
			if from.After(window) {
				window = from
			}
		}
		seq++
		pid := r.n.sb.VswitchdPID()
		err := r.pathOnce(ctx, seq)
		if again, _ := r.pathDue(); again.IsZero() || r.n.sb.VswitchdPID() != pid || ctx.Err() != nil {
			window, warned = time.Time{}, false // the look is void: a window closed meanwhile
			continue
		}
		if err == nil {
			r.rep.Checks.add(InvPath, nil)
			r.mu.Lock()
			r.pathOK++
			r.mu.Unlock()
			window, warned = time.Now(), false
			continue
		}
		if time.Since(window) > pathBound && !warned {
			warned = true
			r.rep.Checks.add(InvPath, errors.New("violated"))
			r.violate(InvPath, "flowstated dead for %v, vswitchd (pid %d) and the guard running: no controller got through the proxy socket to br-int for %v: %v",
				time.Since(r.n.deadSince()).Round(time.Millisecond), pid, time.Since(window).Round(time.Millisecond), err)
		}
	}
}

// pathOnce dials the proxy socket, installs flow seq of pathTable, waits
// for the barrier reply and looks for the flow on br-int.
func (r *run) pathOnce(ctx context.Context, seq int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := ofconn.Dial(ctx, r.n.proxySocket(), ofconn.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	ip := fmt.Sprintf("10.31.%d.%d", seq/250%250, seq%250+1)
	p, _, err := canon.Parse(entry.KindFlow, fmt.Sprintf("table=%d,priority=10,tcp,nw_dst=%s,actions=drop", pathTable, ip))
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if err := c.Bundle(ctx, []ofconn.Message{p}); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	out, err := r.n.sb.Ofctl(ctx, "--no-stats", "--no-names", "dump-flows", Managed, fmt.Sprintf("table=%d", pathTable))
	if err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	if !strings.Contains(out, "nw_dst="+ip+" ") && !strings.Contains(out, "nw_dst="+ip+",") {
		return fmt.Errorf("the barrier was answered but br-int lacks nw_dst=%s in table %d", ip, pathTable)
	}
	return nil
}
