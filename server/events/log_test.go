package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/errdefs"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newTestLog returns a log without heartbeats (unless opts asks for them),
// closed at the end of the test.
func newTestLog(t *testing.T, opts Options) *Log {
	t.Helper()
	if opts.Heartbeat == 0 {
		opts.Heartbeat = -1
	}
	l := NewLog(opts)
	t.Cleanup(l.Close)
	return l
}

func publishN(l *Log, n int) {
	for i := 0; i < n; i++ {
		l.Publish(Event{Type: DriftCorrected, Bridge: "br-int", Message: "drift " + strconv.Itoa(i)})
	}
}

func recv(ctx context.Context, t *testing.T, s *Subscription) Event {
	t.Helper()
	select {
	case e, ok := <-s.C():
		if !ok {
			t.Fatalf("subscription closed early: %v", s.Err())
		}
		return e
	case <-ctx.Done():
		t.Fatalf("no event: %v", ctx.Err())
	}
	return Event{}
}

// wantRevisions receives len(want) events and checks their revisions.
func wantRevisions(ctx context.Context, t *testing.T, s *Subscription, want ...uint64) {
	t.Helper()
	for _, w := range want {
		if e := recv(ctx, t, s); e.Revision != w {
			t.Fatalf("got revision %d (%s), want %d", e.Revision, e.Type, w)
		}
	}
}

// waitClosed drains C until it is closed and returns Err.
func waitClosed(ctx context.Context, t *testing.T, s *Subscription) error {
	t.Helper()
	for {
		select {
		case _, ok := <-s.C():
			if !ok {
				return s.Err()
			}
		case <-ctx.Done():
			t.Fatalf("subscription not closed: %v", ctx.Err())
		}
	}
}

func TestPublishAssignsRevisions(t *testing.T) {
	l := newTestLog(t, Options{})
	if got := l.Revision(); got != 0 {
		t.Fatalf("Revision of an empty log = %d, want 0", got)
	}
	attrs := map[string]string{"entries": "167"}
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := uint64(1); i <= 3; i++ {
		e := l.Publish(Event{Type: ReplayFinished, Attrs: attrs})
		if e.Revision != i {
			t.Fatalf("revision %d, want %d", e.Revision, i)
		}
		if e.Time.IsZero() {
			t.Fatal("Publish did not set Time")
		}
	}
	if e := l.Publish(Event{Type: FlagCleared, Time: at}); !e.Time.Equal(at) {
		t.Fatalf("Publish replaced Time %v with %v", at, e.Time)
	}
	if e := l.Publish(Event{Type: Heartbeat}); e.Revision != 0 {
		t.Fatalf("published heartbeat got revision %d, want 0", e.Revision)
	}
	if got := l.Revision(); got != 4 {
		t.Fatalf("Revision = %d, want 4", got)
	}

	// Publish copied Attrs: the caller's later change is not seen.
	ctx := testContext(t)
	s, err := l.Subscribe(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	attrs["entries"] = "0"
	if e := recv(ctx, t, s); e.Attrs["entries"] != "167" || e.Type != ReplayFinished {
		t.Fatalf("replayed %+v, want ReplayFinished with entries=167", e)
	}
}

func TestSubscribeFrom(t *testing.T) {
	// Capacity 8 after 20 events: revisions 13..20 are retained.
	tests := []struct {
		name    string
		from    uint64
		want    []uint64 // replayed before the live event 21
		wantErr error
		oldest  uint64
	}{
		{name: "now", from: 0},
		{name: "current", from: 20},
		{name: "retained", from: 15, want: []uint64{16, 17, 18, 19, 20}},
		{name: "oldest retained", from: 12, want: []uint64{13, 14, 15, 16, 17, 18, 19, 20}},
		{name: "compacted", from: 11, wantErr: ErrCompacted, oldest: 13},
		{name: "long compacted", from: 1, wantErr: ErrCompacted, oldest: 13},
		{name: "future", from: 21, wantErr: ErrFutureRevision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			l := newTestLog(t, Options{Capacity: 8, SubscriberBuffer: 4})
			publishN(l, 20)
			s, err := l.Subscribe(ctx, tt.from)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
					t.Fatalf("Subscribe(%d) = %v, want %v", tt.from, err, tt.wantErr)
				}
				var ce *CompactedError
				if errors.As(err, &ce) != (tt.oldest != 0) || (ce != nil && ce.Oldest != tt.oldest) {
					t.Fatalf("Subscribe(%d) = %#v, want oldest %d", tt.from, err, tt.oldest)
				}
				return
			}
			if err != nil {
				t.Fatalf("Subscribe(%d): %v", tt.from, err)
			}
			defer s.Close()
			wantRevisions(ctx, t, s, tt.want...)
			l.Publish(Event{Type: BridgeConnected, Bridge: "br-int"})
			if e := recv(ctx, t, s); e.Revision != 21 || e.Type != BridgeConnected {
				t.Fatalf("live event %+v, want revision 21 BridgeConnected", e)
			}
		})
	}
}

func TestSubscribeEmptyLog(t *testing.T) {
	ctx := testContext(t)
	l := newTestLog(t, Options{})
	if _, err := l.Subscribe(ctx, 1); !errors.Is(err, ErrFutureRevision) {
		t.Fatalf("Subscribe(1) on empty log = %v, want ErrFutureRevision", err)
	}
	s, err := l.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	publishN(l, 2)
	wantRevisions(ctx, t, s, 1, 2)
}

// A client resuming gets exactly what it missed, then live events, while a
// publisher keeps going: no gap, no duplicate.
func TestResumeWhilePublishing(t *testing.T) {
	ctx := testContext(t)
	l := newTestLog(t, Options{Capacity: 1000, SubscriberBuffer: 1000})
	publishN(l, 100)

	first, err := l.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	publishN(l, 10) // 101..110
	wantRevisions(ctx, t, first, 101, 102, 103)
	first.Close()
	if err := first.Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Err after Close = %v, want ErrClosed", err)
	}

	var wg sync.WaitGroup
	wg.Go(func() { publishN(l, 200) }) // 111..310, concurrent with the replay
	s, err := l.Subscribe(ctx, 103)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for want := uint64(104); want <= 310; want++ {
		wantRevisions(ctx, t, s, want)
	}
	wg.Wait()
}

func TestConcurrentPublishers(t *testing.T) {
	ctx := testContext(t)
	const publishers, each = 4, 250
	l := newTestLog(t, Options{SubscriberBuffer: publishers * each})
	subs := make([]*Subscription, 3)
	for i := range subs {
		s, err := l.Subscribe(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() { publishN(l, each) })
	}
	for _, s := range subs {
		for want := uint64(1); want <= publishers*each; want++ {
			wantRevisions(ctx, t, s, want)
		}
	}
	wg.Wait()
	if got := l.Revision(); got != publishers*each {
		t.Fatalf("Revision = %d, want %d", got, publishers*each)
	}
}

func TestSlowSubscriberDropped(t *testing.T) {
	ctx := testContext(t)
	const buffer = 16
	l := newTestLog(t, Options{SubscriberBuffer: buffer})
	slow, err := l.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := l.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()

	// The producer never waits for the reader that does not read: run it
	// with the fast reader consuming in lockstep.
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; i < 10*buffer; i++ {
			l.Publish(Event{Type: DriftCorrected})
			select {
			case e := <-fast.C():
				if e.Revision != uint64(i+1) {
					t.Errorf("fast reader got %d, want %d", e.Revision, i+1)
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	select {
	case <-published:
	case <-ctx.Done():
		t.Fatal("Publish blocked on a slow subscriber")
	}

	if err := waitClosed(ctx, t, slow); !errors.Is(err, ErrSlowSubscriber) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("slow subscriber Err = %v, want ErrSlowSubscriber", err)
	}
	if got := l.Dropped(); got != 1 {
		t.Fatalf("Dropped = %d, want 1", got)
	}
	if got := l.Subscribers(); got != 1 {
		t.Fatalf("Subscribers = %d, want 1 (the fast one)", got)
	}
}

// A long replay does not count against the buffer; only live lag does.
func TestReplayLargerThanBuffer(t *testing.T) {
	ctx := testContext(t)
	l := newTestLog(t, Options{Capacity: 100, SubscriberBuffer: 4})
	publishN(l, 100)
	s, err := l.Subscribe(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	publishN(l, 4) // 101..104: live lag 4, within the buffer
	for want := uint64(2); want <= 104; want++ {
		wantRevisions(ctx, t, s, want)
	}
	if got := l.Dropped(); got != 0 {
		t.Fatalf("Dropped = %d, want 0", got)
	}
}

func TestHeartbeat(t *testing.T) {
	ctx := testContext(t)
	l := newTestLog(t, Options{Heartbeat: 20 * time.Millisecond})
	publishN(l, 3)
	s, err := l.Subscribe(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantRevisions(ctx, t, s, 2, 3)
	// Bounded by ctx: recv fails if no heartbeat comes.
	if e := recv(ctx, t, s); e.Type != Heartbeat || e.Revision != 3 || e.Time.IsZero() {
		t.Fatalf("got %+v, want a heartbeat with revision 3 and a time", e)
	}
	// Heartbeats consume no revision.
	if e := l.Publish(Event{Type: ModuleReady, Module: "cni"}); e.Revision != 4 {
		t.Fatalf("revision after heartbeat = %d, want 4", e.Revision)
	}
	for {
		if e := recv(ctx, t, s); e.Type != Heartbeat {
			if e.Revision != 4 {
				t.Fatalf("got revision %d, want 4", e.Revision)
			}
			return
		}
	}
}

func TestEndings(t *testing.T) {
	tests := []struct {
		name string
		end  func(l *Log, s *Subscription, cancel context.CancelFunc)
		want error
	}{
		{name: "log closed", end: func(l *Log, _ *Subscription, _ context.CancelFunc) { l.Close() }, want: ErrClosed},
		{name: "subscription closed", end: func(_ *Log, s *Subscription, _ context.CancelFunc) { s.Close(); s.Close() }, want: ErrClosed},
		{name: "context canceled", end: func(_ *Log, _ *Subscription, cancel context.CancelFunc) { cancel() }, want: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			l := newTestLog(t, Options{})
			subCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			s, err := l.Subscribe(subCtx, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Err(); err != nil {
				t.Fatalf("Err of a running subscription = %v", err)
			}
			publishN(l, 1) // the reader is not reading: run blocks in send
			tt.end(l, s, cancel)
			if err := waitClosed(ctx, t, s); !errors.Is(err, tt.want) {
				t.Fatalf("Err = %v, want %v", err, tt.want)
			}
			// The subscription leaves the log before C is closed.
			if got := l.Subscribers(); got != 0 {
				t.Fatalf("Subscribers = %d after the end, want 0", got)
			}
		})
	}
}

func TestSubscribeAfterClose(t *testing.T) {
	l := NewLog(Options{})
	l.Close()
	l.Close()
	if _, err := l.Subscribe(testContext(t), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if e := l.Publish(Event{Type: BridgeDisconnected}); e.Revision != 1 {
		t.Fatalf("Publish after Close got revision %d, want 1", e.Revision)
	}
}

func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{0, 8} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			// A buffer large enough that readers on a busy machine are not
			// dropped mid-run; drops are reported as a metric.
			l := NewLog(Options{Heartbeat: -1, SubscriberBuffer: 1 << 16})
			var wg sync.WaitGroup
			for range n {
				s, err := l.Subscribe(b.Context(), 0)
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					for range s.C() {
					}
				})
			}
			e := Event{Type: DriftCorrected, Bridge: "br-int", Attrs: map[string]string{"entries": "3"}}
			b.ReportAllocs()
			for b.Loop() {
				l.Publish(e)
			}
			b.StopTimer()
			b.ReportMetric(float64(l.Dropped()), "dropped")
			l.Close()
			wg.Wait()
		})
	}
}
