package ofproxy

import (
	"errors"
	"sync"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// The applier
//
// A recording session applies its standalone changes on a goroutine of its
// own (applier.run), so that the controller-to-switch pump goes on reading
// while a change is stored and sent:
//
//   - the pump hands the changes it read over (hand), and the applier
//     applies whatever was handed since its last change as one (recorder.
//     standalone): a burst is applied in few changes, whatever the size of
//     the socket's buffer;
//   - a barrier goes to the switch at once, and its reply waits in the
//     switch-to-controller pump until every change handed before the
//     barrier is applied (hold, release): the switch answers it while the
//     store commits, yet the controller gets it only once its changes are
//     durable and decided, after the errors of those refused;
//   - anything else the pump does (relay a message, answer a bundle
//     control) waits for the applier to be idle first (settle), as it
//     waited for its own apply before.
//
// A change that fails (errUnknownOutcome) ends the session: the applier
// drops what is queued, and no held barrier reply reaches the controller.
type applier struct {
	r *recorder

	mu   sync.Mutex
	cond sync.Cond // signalled whenever any of the fields below changes
	// queue is what was handed and not yet taken, queued its bytes.
	queue  []ofconn.Message
	queued int
	// handed and applied count the messages handed over and those whose
	// change ended (applied, or refused and answered).
	handed, applied uint64
	// holds are the barriers sent to the switch, oldest first: the reply
	// to each waits until applied reaches its target.
	holds []hold
	// err is the change that failed; the session ends.
	err error
	// stopped: the pump is done, the applier ends once the queue is
	// applied; started: run was started, and exited is closed when it
	// returns.
	stopped, started bool
	exited           chan struct{}
}

type hold struct {
	xid    uint32
	target uint64
}

// maxApply bounds the bytes of messages one change takes from the queue,
// and the queue holds at most twice that before the pump waits: a few
// thousand flows a write, enough that its commit and bundle cost little a
// flow, and little enough that the write's transaction stays small (about
// 1.2 KB an entry while it runs, docs/operations.md).
const maxApply = 1 << 20

// errUnconfirmed ends the switch-to-controller pump at a barrier reply whose
// changes failed: the session is ending, and the reply must not go out.
var errUnconfirmed = errors.New("ofproxy: the changes before a barrier were not confirmed")

func newApplier(r *recorder) *applier {
	a := &applier{r: r, exited: make(chan struct{})}
	a.cond.L = &a.mu
	return a
}

// hand queues msgs to be applied after what is queued already; it waits
// while the queue is full, and returns the failure that ends the session.
func (a *applier) hand(msgs []ofconn.Message) error {
	n := 0
	for _, m := range msgs {
		n += len(m)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.queued >= 2*maxApply && a.err == nil {
		a.cond.Wait()
	}
	if a.err != nil {
		return a.err
	}
	a.queue = append(a.queue, msgs...)
	a.queued += n
	a.handed += uint64(len(msgs))
	if !a.started {
		a.started = true
		go a.run()
	}
	a.cond.Broadcast()
	return nil
}

// hold registers a barrier about to be sent to the switch: its reply waits
// for what was handed before it.
func (a *applier) hold(xid uint32) {
	a.mu.Lock()
	a.holds = append(a.holds, hold{xid: xid, target: a.handed})
	a.mu.Unlock()
}

// release waits, at the switch's reply to a barrier, until the changes
// handed before the barrier are applied; errUnconfirmed when they failed.
// Barrier replies come in the order of their requests, so the oldest hold
// is this reply's.
func (a *applier) release(xid uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.holds) == 0 || a.holds[0].xid != xid {
		return nil // no barrier of the pump's: nothing to wait for
	}
	h := a.holds[0]
	a.holds = a.holds[1:]
	for a.applied < h.target && a.err == nil {
		a.cond.Wait()
	}
	if a.err != nil {
		return errUnconfirmed
	}
	return nil
}

// settle waits until every change handed is applied, and returns the
// failure that ends the session.
func (a *applier) settle() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.applied < a.handed && a.err == nil {
		a.cond.Wait()
	}
	return a.err
}

// failure is the change that failed, nil if none.
func (a *applier) failure() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// stop ends the applier once what is queued is applied, and waits for it.
func (a *applier) stop() {
	a.mu.Lock()
	a.stopped = true
	started := a.started
	a.cond.Broadcast()
	a.mu.Unlock()
	if started {
		<-a.exited
	}
}

// run applies the queue until the pump stops it, or a change fails.
func (a *applier) run() {
	defer close(a.exited)
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		for len(a.queue) == 0 && !a.stopped {
			a.cond.Wait()
		}
		if len(a.queue) == 0 {
			return
		}
		msgs := a.take()
		a.cond.Broadcast() // room in the queue
		a.mu.Unlock()
		err := a.r.standalone(a.r.s.p.ctx, msgs)
		a.mu.Lock()
		if err != nil {
			a.err = err
			a.queue, a.queued = nil, 0
			a.cond.Broadcast()
			a.r.s.fail(err)
			return
		}
		a.applied += uint64(len(msgs))
		a.cond.Broadcast()
	}
}

// take removes from the queue the messages of the next change: the oldest,
// up to maxApply bytes (at least one message).
func (a *applier) take() []ofconn.Message {
	n, size := 0, 0
	for n < len(a.queue) && (n == 0 || size+len(a.queue[n]) <= maxApply) {
		size += len(a.queue[n])
		n++
	}
	msgs := a.queue[:n:n]
	a.queue = a.queue[n:]
	if len(a.queue) == 0 {
		a.queue = nil
	}
	a.queued -= size
	return msgs
}
