package ofconn

import (
	"context"
	"sync"
)

// waiter collects the messages whose xid falls in [lo, lo+n).
type waiter struct {
	lo, n uint32
	mu    sync.Mutex
	q     [][]byte
	sig   chan struct{}
	// limit bounds the bytes queued (0: no bound); queued counts them.
	// space is signalled by pop, gone closed by unregister.
	limit, queued int
	space, gone   chan struct{}
}

// dumpQueue bounds what a dump's waiter holds. vswitchd builds every reply of a dump before it sends the
// first, then writes them as fast as the socket takes them: without a bound, a consumer slower than the
// reader (decoding, hashing) would find the whole dump of a million flows queued here, some 300 MB. With it,
// the reader stops reading while the consumer catches up, a few milliseconds at a time, which the echo
// timeout allows for: echo replies wait in the socket behind the dump meanwhile.
const dumpQueue = 4 << 20

// push queues f. It never blocks on an unbounded waiter; on a bounded one it waits for room, for the waiter
// to go, or for the connection to die (done), so that the reader stops reading only while a consumer is
// draining.
func (w *waiter) push(f []byte, done <-chan struct{}) {
	w.mu.Lock()
	for w.limit > 0 && w.queued >= w.limit {
		w.mu.Unlock()
		select {
		case <-w.space:
		case <-w.gone:
			return
		case <-done:
			return
		}
		w.mu.Lock()
	}
	w.q = append(w.q, f)
	w.queued += len(f)
	w.mu.Unlock()
	select {
	case w.sig <- struct{}{}:
	default:
	}
}

func (w *waiter) pop() ([]byte, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.q) == 0 {
		return nil, false
	}
	f := w.q[0]
	w.q[0] = nil
	w.q = w.q[1:]
	w.queued -= len(f)
	if w.limit > 0 {
		select {
		case w.space <- struct{}{}:
		default:
		}
	}
	return f, true
}

func (c *Conn) register(lo, n uint32) *waiter { return c.registerLimit(lo, n, 0) }

// registerLimit registers a waiter that holds at most about limit bytes (see waiter.push).
func (c *Conn) registerLimit(lo, n uint32, limit int) *waiter {
	w := &waiter{lo: lo, n: n, sig: make(chan struct{}, 1), limit: limit,
		space: make(chan struct{}, 1), gone: make(chan struct{})}
	c.pmu.Lock()
	c.pending = append(c.pending, w)
	c.pmu.Unlock()
	return w
}

func (c *Conn) unregister(w *waiter) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for i, p := range c.pending {
		if p == w {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			close(w.gone)
			return
		}
	}
}

func (c *Conn) lookup(xid uint32) *waiter {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for _, w := range c.pending {
		if xid-w.lo < w.n {
			return w
		}
	}
	return nil
}

// recv returns the next message for w.
func (c *Conn) recv(ctx context.Context, w *waiter) ([]byte, error) {
	for {
		if f, ok := w.pop(); ok {
			return f, nil
		}
		select {
		case <-w.sig:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			if f, ok := w.pop(); ok {
				return f, nil
			}
			return nil, c.closedErr()
		}
	}
}
