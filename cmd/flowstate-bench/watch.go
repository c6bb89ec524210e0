package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// probeInterval is how often watch asks for an event (MarkReady publishes
// module_ready) until the subscription delivers one: flowstated's idle
// heartbeat comes only every 10 s.
const probeInterval = 100 * time.Millisecond

// watcher owns one Watch stream and the goroutine reading it; close stops
// both.
type watcher struct {
	events chan client.Event
	first  client.Event // the event that showed the stream live
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// watch subscribes to flowstated's events after from and returns once the
// subscription is live: an event arrived (from the zero cursor, one it
// provoked by marking the benchmark's module ready; from a cursor, the
// first retained event after it), so no later event is missed. Heartbeats
// are not forwarded.
func watch(ctx context.Context, c *client.Client, from client.Cursor) (*watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{events: make(chan client.Event, 1024), cancel: cancel, done: make(chan struct{})}
	firstc := make(chan client.Event, 1)
	go func() {
		defer close(w.done)
		defer close(w.events)
		live := false
		w.err = c.Watch(ctx, from, func(ev client.Event) error {
			if !live {
				live = true
				firstc <- ev
				if ev.Type == client.EventHeartbeat {
					return nil
				}
			} else if ev.Type == client.EventHeartbeat {
				return nil
			}
			select {
			case w.events <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	probe := time.NewTicker(probeInterval)
	defer probe.Stop()
	deadline := time.After(stepTimeout)
	for {
		if from.IsZero() {
			if err := c.MarkReady(ctx, module); err != nil {
				w.close()
				return nil, fmt.Errorf("watch flowstated events: mark %s ready to provoke an event: %w", module, err)
			}
		}
		select {
		case ev := <-firstc:
			w.first = ev
			return w, nil
		case <-w.done:
			cancel()
			return nil, fmt.Errorf("watch flowstated events: %w", w.err)
		case <-deadline:
			w.close()
			return nil, errors.New("watch flowstated events: no event")
		case <-ctx.Done():
			w.close()
			return nil, fmt.Errorf("watch flowstated events: %w", ctx.Err())
		case <-probe.C:
		}
	}
}

// next returns the next event of type typ, failing on a failed replay.
func (w *watcher) next(ctx context.Context, typ client.EventType) (client.Event, error) {
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				<-w.done
				return ev, fmt.Errorf("watch ended before %s: %w", typ, w.err)
			}
			if ev.Type == client.EventReplayFinished && ev.Attrs["error"] != "" {
				return ev, fmt.Errorf("replay failed: %s", ev.Attrs["error"])
			}
			if ev.Type == typ {
				return ev, nil
			}
		case <-ctx.Done():
			return client.Event{}, fmt.Errorf("waiting for %s: %w", typ, ctx.Err())
		}
	}
}

// close stops the stream and waits for the goroutine.
func (w *watcher) close() {
	w.cancel()
	<-w.done
}
