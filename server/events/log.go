package events

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Log. Zero values select the defaults.
type Options struct {
	// Capacity is how many events are retained for resuming; default 4096.
	// It is raised to SubscriberBuffer if smaller, so a subscription that is
	// not dropped never needs a discarded event.
	Capacity int
	// SubscriberBuffer is how many live events a subscription may lag behind
	// before it is dropped; default 256.
	SubscriberBuffer int
	// Heartbeat is the idle interval after which a subscription gets a
	// Heartbeat event; default 10s, negative disables heartbeats.
	Heartbeat time.Duration
	// Logger receives drops of slow subscribers; nil discards.
	Logger *slog.Logger
}

// fetchBatch bounds how many events a subscription copies per lock hold.
const fetchBatch = 64

// Log is a bounded, revisioned event log with live subscriptions.
type Log struct {
	capacity  int
	buffer    int
	heartbeat time.Duration
	logger    *slog.Logger

	mu      sync.Mutex
	ring    []Event // revision r lives at ring[(r-1)%capacity]
	rev     uint64  // last assigned revision
	subs    map[*Subscription]struct{}
	closed  bool
	dropped uint64

	wg sync.WaitGroup // subscription goroutines
}

// NewLog returns an empty log; call Close to stop its subscriptions.
func NewLog(opts Options) *Log {
	if opts.Capacity <= 0 {
		opts.Capacity = 4096
	}
	if opts.SubscriberBuffer <= 0 {
		opts.SubscriberBuffer = 256
	}
	opts.Capacity = max(opts.Capacity, opts.SubscriberBuffer)
	if opts.Heartbeat == 0 {
		opts.Heartbeat = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Log{
		capacity:  opts.Capacity,
		buffer:    opts.SubscriberBuffer,
		heartbeat: opts.Heartbeat,
		logger:    opts.Logger,
		ring:      make([]Event, opts.Capacity),
		subs:      make(map[*Subscription]struct{}),
	}
}

// Publish assigns e the next revision (and the current time if Time is zero),
// stores it and wakes the subscriptions. It never blocks on a subscriber: one
// that lags more than SubscriberBuffer live events is dropped instead. A
// Heartbeat is not stored and comes back with Revision 0.
func (l *Log) Publish(e Event) Event {
	if e.Type == Heartbeat {
		e.Revision = 0
		return e
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Attrs = maps.Clone(e.Attrs)

	slow := 0
	l.mu.Lock()
	l.rev++
	e.Revision = l.rev
	l.ring[(e.Revision-1)%uint64(l.capacity)] = e
	for s := range l.subs {
		// Replayed events (up to floor) do not count against the buffer.
		// Dropping here, under the same lock as the overwrite above, also
		// guarantees a live subscription never needs an overwritten event.
		if l.rev-max(s.delivered.Load(), s.floor) > uint64(l.buffer) {
			slow++
			l.stopLocked(s, ErrSlowSubscriber)
			continue
		}
		select {
		case s.notify <- struct{}{}:
		default: // already notified
		}
	}
	l.dropped += uint64(slow)
	l.mu.Unlock()
	if slow > 0 {
		l.logger.Warn("events: dropped slow subscribers", "count", slow, "revision", e.Revision, "buffer", l.buffer)
	}
	return e
}

// Revision returns the last assigned revision, 0 before the first Publish.
func (l *Log) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// Dropped returns how many subscriptions were dropped for being slow.
func (l *Log) Dropped() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Subscribers returns the number of live subscriptions.
func (l *Log) Subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs)
}

// oldestLocked returns the oldest retained revision (rev+1 when empty).
func (l *Log) oldestLocked() uint64 {
	return l.rev - min(l.rev, uint64(l.capacity)) + 1
}

// Subscribe delivers the retained events with Revision > from, then live ones,
// until ctx is done, the subscription or the log is closed, or it is dropped
// as slow. from = 0 means from now. It fails with a *CompactedError when
// events after from are no longer retained, with ErrFutureRevision when from
// is beyond the current revision, and with ErrClosed after Close.
func (l *Log) Subscribe(ctx context.Context, from uint64) (*Subscription, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if from == 0 {
		from = l.rev
	}
	if from > l.rev {
		return nil, ErrFutureRevision
	}
	if oldest := l.oldestLocked(); from < oldest-1 {
		return nil, &CompactedError{Requested: from, Oldest: oldest}
	}
	// The replay is copied now so live events cannot evict it while the
	// subscriber is still reading it.
	backlog := make([]Event, 0, l.rev-from)
	for r := from + 1; r <= l.rev; r++ {
		backlog = append(backlog, l.ring[(r-1)%uint64(l.capacity)])
	}
	s := &Subscription{
		log:    l,
		floor:  l.rev,
		ch:     make(chan Event),
		notify: make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	s.delivered.Store(from)
	l.subs[s] = struct{}{}
	l.wg.Add(1)
	go s.run(ctx, backlog)
	return s, nil
}

// fetch appends to buf the events after the revision after, at most fetchBatch.
// ok is false once s was stopped.
func (l *Log) fetch(s *Subscription, after uint64, buf []Event) (_ []Event, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, live := l.subs[s]; !live {
		return buf, false
	}
	for r := after + 1; r <= l.rev && len(buf) < fetchBatch; r++ {
		buf = append(buf, l.ring[(r-1)%uint64(l.capacity)])
	}
	return buf, true
}

// stopLocked removes s and records why it ended; the first reason wins.
func (l *Log) stopLocked(s *Subscription, err error) {
	if _, live := l.subs[s]; !live {
		return
	}
	delete(l.subs, s)
	s.err = err
	close(s.stop)
}

func (l *Log) stopSub(s *Subscription, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopLocked(s, err)
}

// Close ends every subscription with ErrClosed and waits for their
// goroutines. Publish still works afterwards; Subscribe fails.
func (l *Log) Close() {
	l.mu.Lock()
	l.closed = true
	for s := range l.subs {
		l.stopLocked(s, ErrClosed)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// Subscription is one reader of the log. Read C until it is closed, then Err
// says why.
type Subscription struct {
	log       *Log
	floor     uint64        // the log's revision at Subscribe; immutable
	delivered atomic.Uint64 // last revision handed to the reader
	ch        chan Event
	notify    chan struct{} // poked by Publish
	stop      chan struct{} // closed (under log.mu) when the subscription ends
	done      chan struct{} // closed when run returns
	err       error         // guarded by log.mu; set before stop is closed
}

// Floor returns the log's revision at Subscribe: a subscription from now
// delivers the events after it.
func (s *Subscription) Floor() uint64 { return s.floor }

// C returns the delivery channel; it is closed when the subscription ends.
func (s *Subscription) C() <-chan Event { return s.ch }

// Err returns why the subscription ended (nil while it runs): ErrClosed,
// ErrSlowSubscriber or the context's error.
func (s *Subscription) Err() error {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	return s.err
}

// Close ends the subscription with ErrClosed and waits for its goroutine.
// It is idempotent.
func (s *Subscription) Close() {
	s.log.stopSub(s, ErrClosed)
	<-s.done
}

// run delivers the backlog, then follows the log; it owns ch.
func (s *Subscription) run(ctx context.Context, backlog []Event) {
	defer s.log.wg.Done()
	defer close(s.done)
	defer close(s.ch)

	var tick <-chan time.Time
	var hb *time.Timer
	if s.log.heartbeat > 0 {
		hb = time.NewTimer(s.log.heartbeat)
		defer hb.Stop()
		tick = hb.C
	}
	send := func(e Event) bool {
		select {
		case s.ch <- e:
			if hb != nil {
				hb.Reset(s.log.heartbeat)
			}
			return true
		case <-s.stop:
			return false
		case <-ctx.Done():
			s.log.stopSub(s, ctx.Err())
			return false
		}
	}

	for _, e := range backlog {
		if !send(e) {
			return
		}
		s.delivered.Store(e.Revision)
	}
	next, buf := s.floor, make([]Event, 0, fetchBatch)
	for {
		batch, ok := s.log.fetch(s, next, buf[:0])
		if !ok {
			return
		}
		for _, e := range batch {
			if !send(e) {
				return
			}
			s.delivered.Store(e.Revision)
			next = e.Revision
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-s.notify:
		case <-tick:
			// Covered through next: everything up to it was delivered.
			if !send(Event{Revision: next, Time: time.Now(), Type: Heartbeat}) {
				return
			}
		case <-s.stop:
			return
		case <-ctx.Done():
			s.log.stopSub(s, ctx.Err())
			return
		}
	}
}
