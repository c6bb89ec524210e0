package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/errdefs"
)

// ErrResync says Watch cannot continue from the caller's position without
// missing events: flowstated restarted (a new stream), the position left its
// retained window, or the connection was lost before the position was known.
// Watch again from the zero Cursor and, once its first event arrived, read
// the state again (Status, List): later changes arrive as events.
var ErrResync = errors.New("client: events lost, resync needed")

// Cursor is a position in flowstated's event stream: the run of flowstated
// (StreamID) and the last revision seen in it. The zero Cursor means "from
// now". Event.Cursor gives the position after an event.
type Cursor struct {
	StreamID string
	Revision uint64
}

// IsZero reports whether c is the zero Cursor.
func (c Cursor) IsZero() bool { return c == Cursor{} }

// Watch backoff between reconnection attempts.
const (
	watchBackoffMin = 100 * time.Millisecond
	watchBackoffMax = 2 * time.Second
)

// Watch calls fn with each event after from, heartbeats included, until ctx
// ends or fn returns an error (returned as is). Events reach fn in revision
// order, each exactly once:
//
//  1. When the connection breaks (flowstated restarting, a frozen server
//     noticed by keepalive), Watch reconnects with a backoff and resumes
//     after the last event fn saw.
//  2. When flowstated cannot resume there (it restarted, so the stream id
//     changed; or the revision left its window), or the events received
//     do not follow on from it, Watch returns an error wrapping ErrResync
//     (and errdefs.ErrFailedPrecondition when the server refused).
//  3. A Watch from the zero Cursor learns its position from the first event:
//     flowstated starts such a stream with a heartbeat. When the connection
//     is lost before that, Watch reconnects as in 1 and, once flowstated
//     answers again, returns ErrResync (what happened in between is unknown).
//  4. When flowstated stays unreachable for longer than the reconnect window
//     (WithWatchReconnect), Watch returns an error wrapping
//     errdefs.ErrUnavailable (and ErrResync too when the position was never
//     learnt); calling it again with the last Cursor resumes.
func (c *Client) Watch(ctx context.Context, from Cursor, fn func(Event) error) error {
	cur := from
	var down time.Time // when the current outage began; zero while events flow
	delay := watchBackoffMin
	lost := false // a stream from now broke before its first event
	for {
		got, opened, err := c.watchStream(ctx, &cur, lost, fn)
		var ce callerError
		switch {
		case errors.As(err, &ce):
			return ce.err
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrResync):
			return err
		case errors.Is(err, errdefs.ErrFailedPrecondition):
			return fmt.Errorf("%w: %w", ErrResync, err)
		case !errors.Is(err, errdefs.ErrUnavailable):
			return err
		}
		lost = lost || (opened && cur.IsZero())
		if got {
			down, delay = time.Time{}, watchBackoffMin
		}
		if down.IsZero() {
			down = time.Now()
		}
		if out := time.Since(down); c.watchReconnect >= 0 && out > c.watchReconnect {
			if lost {
				return fmt.Errorf("client: watch: flowstated unreachable for %v, lost before the first event: %w (%w)",
					out.Round(time.Millisecond), err, ErrResync)
			}
			return fmt.Errorf("client: watch: flowstated unreachable for %v (resume from stream %s revision %d): %w",
				out.Round(time.Millisecond), cur.StreamID, cur.Revision, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, watchBackoffMax)
	}
}

// callerError carries fn's error out of watchStream untouched.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }

// watchStream runs one Watch call from *cur, advancing *cur past each event
// fn accepted. got reports that at least one event arrived, opened that the
// call reached a transport. lost: an earlier stream from now broke before
// its first event, so this one's first event ends Watch with ErrResync.
func (c *Client) watchStream(ctx context.Context, cur *Cursor, lost bool, fn func(Event) error) (got, opened bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the call when fn fails
	stream, err := c.api.Watch(ctx, &flowstatev1.WatchRequest{FromRevision: cur.Revision, StreamId: cur.StreamID})
	if err != nil {
		return false, false, fromGRPC(err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// flowstated ends a live stream only with an error status.
			return got, true, fmt.Errorf("client: watch: stream ended by flowstated: %w", errdefs.ErrUnavailable)
		}
		if err != nil {
			return got, true, fromGRPC(err)
		}
		got = true
		ev := fromEvent(resp.GetEvent())
		if lost {
			return got, true, fmt.Errorf("client: watch: connection lost before the first event; flowstated answers again (stream %s): %w",
				ev.StreamID, ErrResync)
		}
		if err := follows(*cur, ev); err != nil {
			return got, true, err
		}
		*cur = ev.Cursor()
		if err := fn(ev); err != nil {
			return got, true, callerError{err}
		}
	}
}

// follows checks that ev comes right after cur. The server checks a resume
// itself, except from revision 0, which it serves "from now" whatever the
// stream id: this check turns the gap that can leave into ErrResync.
func follows(cur Cursor, ev Event) error {
	if cur.StreamID == "" {
		return nil // from now: the first event sets the position
	}
	if ev.StreamID != cur.StreamID {
		return fmt.Errorf("%w: flowstated restarted (stream %s, was %s)", ErrResync, ev.StreamID, cur.StreamID)
	}
	want := cur.Revision + 1
	if ev.Type == EventHeartbeat {
		want = cur.Revision // a heartbeat repeats the revision last sent
	}
	if ev.Revision != want {
		return fmt.Errorf("%w: got revision %d after %d", ErrResync, ev.Revision, cur.Revision)
	}
	return nil
}
