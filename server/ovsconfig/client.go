package ovsconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrNotConnected means the Client has no live connection to ovsdb-server
	// right now; it keeps redialling in the background.
	ErrNotConnected = errors.New("ovsconfig: not connected to ovsdb-server")
	// ErrClosed means Close was called.
	ErrClosed = errors.New("ovsconfig: client closed")
	// ErrNotAcknowledged means ovs-vswitchd did not apply a configuration
	// change (cur_cfg did not reach next_cfg) before the context ended.
	ErrNotAcknowledged = errors.New("ovsconfig: change not acknowledged by ovs-vswitchd")
)

const (
	defaultInactivityTimeout = 5 * time.Second
	defaultReconnectTimeout  = 10 * time.Second
	defaultRequestTimeout    = 10 * time.Second

	// Redial backoff bounds: quick enough to catch an ovsdb-server restart
	// within a second, gentle enough not to spin while it stays down.
	minRedialDelay = 50 * time.Millisecond
	maxRedialDelay = 2 * time.Second

	// teardownTimeout bounds the wait for libovsdb's goroutines after closing a
	// connection; they only need to notice the closed socket.
	teardownTimeout = 5 * time.Second
)

// Options configures a Client. The zero value is usable.
type Options struct {
	// InactivityTimeout is both the echo probe interval and how long an echo
	// may stay unanswered before the connection is declared dead. Optional,
	// default 5s.
	InactivityTimeout time.Duration
	// ReconnectTimeout bounds one connection attempt, Dial's or a redial's
	// (connect, schema check, monitor, initial row). Optional, default 10s.
	ReconnectTimeout time.Duration
	// RequestTimeout bounds one transaction, on top of the caller's context.
	// libovsdb holds its connection lock for the whole call, so an unbounded
	// call to a silent server would also hold up the reconnect. Optional,
	// default 10s.
	RequestTimeout time.Duration
	// Logger receives the Client's and libovsdb's logs. Optional, nil
	// discards them.
	Logger *slog.Logger
}

// Client is a connection to ovsdb-server's Open_vSwitch database. It is safe
// for concurrent use and must be closed.
type Client struct {
	addr  string
	opts  Options
	log   *slog.Logger
	logr  logr.Logger
	model model.ClientDBModel

	cancel    context.CancelFunc // stops run
	done      chan struct{}      // closed when run has returned
	closeOnce sync.Once

	mu      sync.Mutex
	ovs     client.Client // nil while disconnected
	closed  bool
	changed chan struct{} // closed and replaced on every cache or connection change
}

// Dial connects to ovsdb-server at addr ("unix:/path/db.sock" or
// "tcp:host:port"), monitors the Open_vSwitch, Bridge and Flow_Table tables and waits
// until the Open_vSwitch row is cached. Failed attempts are retried with
// backoff until ctx ends; the error then carries the last failure.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	if !strings.HasPrefix(addr, "unix:") && !strings.HasPrefix(addr, "tcp:") {
		return nil, fmt.Errorf("ovsconfig: dial %q: want unix:PATH or tcp:HOST:PORT", addr)
	}
	if opts.InactivityTimeout <= 0 {
		opts.InactivityTimeout = defaultInactivityTimeout
	}
	if opts.ReconnectTimeout <= 0 {
		opts.ReconnectTimeout = defaultReconnectTimeout
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = defaultRequestTimeout
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dbModel, err := newClientDBModel()
	if err != nil {
		return nil, fmt.Errorf("ovsconfig: build database model: %w", err)
	}
	c := &Client{
		addr:    addr,
		opts:    opts,
		log:     logger.With("addr", addr),
		model:   dbModel,
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	// libovsdb logs through logr; V(n) becomes slog level -n, so its chatter
	// (V(3) to V(5)) only shows with handlers set to Debug or lower.
	c.logr = logr.FromSlogHandler(c.log.With("component", "libovsdb").Handler())

	ovs, err := c.dialLoop(ctx)
	if err != nil {
		return nil, fmt.Errorf("ovsconfig: dial %s: %w", addr, err)
	}
	c.setCurrent(ovs)

	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.run(runCtx, ovs)
	// The owner says what the connection is for ("ovsdb connected"):
	// logged here too, one connect would read as two.
	c.log.Debug("ovsconfig: connected to ovsdb-server")
	return c, nil
}

// Close disconnects, stops the Client's goroutines and waits for them. It is
// safe to call more than once.
func (c *Client) Close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		<-c.done
		c.notify()
	})
}

// Connected reports whether the Client has a live, monitored connection.
func (c *Client) Connected() bool {
	ovs, err := c.current()
	return err == nil && ovs.Cache() != nil
}

// Changed returns a channel that is closed at the next change of the cached
// Open_vSwitch, Bridge or Flow_Table rows or of the connection state. Take it before
// reading the state it guards, then wait on it, to miss no change.
func (c *Client) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

func (c *Client) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Client) setCurrent(ovs client.Client) {
	c.mu.Lock()
	c.ovs = ovs
	c.mu.Unlock()
	c.notify()
}

// current returns the live libovsdb client or why there is none.
func (c *Client) current() (client.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrClosed
	case c.ovs == nil:
		return nil, ErrNotConnected
	}
	return c.ovs, nil
}

// run supervises the connection: it waits for the current one to die, then
// redials until it succeeds or ctx (Close) ends. It owns every libovsdb
// client it holds and closes each before returning.
func (c *Client) run(ctx context.Context, ovs client.Client) {
	defer close(c.done)
	for {
		c.supervise(ctx, ovs)
		c.setCurrent(nil)
		c.teardown(ovs)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("ovsconfig: connection to ovsdb-server lost, redialling")
		var err error
		ovs, err = c.dialLoop(ctx)
		if err != nil {
			return // only when ctx ended
		}
		c.setCurrent(ovs)
		c.log.Info("ovsconfig: reconnected to ovsdb-server")
	}
}

// supervise returns when ovs has disconnected, stops answering echoes, or ctx
// ends.
func (c *Client) supervise(ctx context.Context, ovs client.Client) {
	probe := time.NewTicker(c.opts.InactivityTimeout)
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ovs.DisconnectNotify():
			return
		case <-probe.C:
			// libovsdb sends its disconnect notification without blocking,
			// so it can be missed; a nil cache is its lasting trace.
			if ovs.Cache() == nil {
				return
			}
			ectx, cancel := context.WithTimeout(ctx, c.opts.InactivityTimeout)
			err := ovs.Echo(ectx)
			// libovsdb's Echo hides a timeout behind "incorrect server
			// response"; name it.
			if err != nil && ectx.Err() != nil {
				err = fmt.Errorf("no echo reply within %v", c.opts.InactivityTimeout)
			}
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("ovsconfig: ovsdb-server did not answer echo", "error", err)
				}
				return
			}
		}
	}
}

// teardown closes ovs and waits (bounded) until libovsdb has cleared its
// connection state, which it does as the last step of its own goroutines.
func (c *Client) teardown(ovs client.Client) {
	ovs.Close()
	deadline := time.NewTimer(teardownTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ovs.Cache() != nil {
		select {
		case <-ovs.DisconnectNotify():
			return
		case <-deadline.C:
			c.log.Warn("ovsconfig: libovsdb did not finish closing its connection")
			return
		case <-tick.C:
		}
	}
}

// startMonitor starts mon on ovs. libovsdb v0.7.0 reads the reply of a
// monitor call whose context ended while its reader may still be writing
// it (a data race, seen when flowstated stops during a connect): the call
// keeps ctx's deadline but not its cancellation, so a stop waits for
// ovsdb-server's answer, milliseconds, or at most the attempt's deadline
// when the server hangs. A stop in between fails the attempt afterwards.
func startMonitor(ctx context.Context, ovs client.Client, mon *client.Monitor) error {
	mctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		mctx, cancel = context.WithDeadline(mctx, d)
		defer cancel()
	}
	_, err := ovs.Monitor(mctx, mon)
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// dialLoop calls connect until it succeeds or ctx ends, backing off between
// attempts, each bounded by ReconnectTimeout.
func (c *Client) dialLoop(ctx context.Context) (client.Client, error) {
	delay := minRedialDelay
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, c.opts.ReconnectTimeout)
		ovs, err := c.connect(actx)
		cancel()
		if err == nil {
			return ovs, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (after %d attempts; last: %w)", ctx.Err(), n, err)
		}
		c.log.Debug("ovsconfig: dial attempt failed", "attempt", n, "error", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (after %d attempts; last: %w)", ctx.Err(), n, err)
		case <-t.C:
		}
		delay = min(2*delay, maxRedialDelay)
	}
}

// connect makes one libovsdb client, connects it, starts the monitor and
// waits until the Open_vSwitch row is cached. On error nothing is left
// running.
func (c *Client) connect(ctx context.Context) (_ client.Client, err error) {
	ovs, err := client.NewOVSDBClient(c.model,
		client.WithEndpoint(c.addr),
		client.WithLogger(&c.logr),
	)
	if err != nil {
		return nil, fmt.Errorf("new libovsdb client: %w", err)
	}
	if err := ovs.Connect(ctx); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		if err != nil {
			c.teardown(ovs)
		}
	}()
	tc := ovs.Cache()
	if tc == nil {
		return nil, fmt.Errorf("connect: %w", ErrNotConnected)
	}
	// The handler only wakes waiters; they re-read the cache, which libovsdb
	// updates before it queues the event.
	wake := func() { c.notify() }
	tc.AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(string, model.Model) { wake() },
		UpdateFunc: func(string, model.Model, model.Model) { wake() },
		DeleteFunc: func(string, model.Model) { wake() },
	})
	// Without a monitor the cache stays empty and reads find nothing.
	// Name the columns: a table monitored without fields gets every column
	// of the server's schema, and updates to the ones the partial model
	// lacks (e.g. Open_vSwitch.bridges) fail in the cache and leave it
	// inconsistent.
	o, b, ft := &ovsRow{}, &bridgeRow{}, &flowTableRow{}
	mon := ovs.NewMonitor(
		client.WithTable(o, &o.OtherConfig, &o.NextCfg, &o.CurCfg, &o.OVSVersion),
		client.WithTable(b, &b.Name, &b.Protocols, &b.DatapathType, &b.FailMode, &b.OtherConfig, &b.ExternalIDs, &b.FlowTables),
		client.WithTable(ft, &ft.FlowLimit, &ft.OverflowPolicy),
	)
	if err := startMonitor(ctx, ovs, mon); err != nil {
		return nil, fmt.Errorf("monitor %s, %s and %s: %w", tableOpenvSwitch, tableBridge, tableFlowTable, err)
	}
	// A database fresh from ovsdb-tool create has no row until
	// `ovs-vsctl init`; wait for it rather than fail.
	for {
		ch := c.Changed()
		if _, err := readOVSRow(ovs); err == nil {
			return ovs, nil
		} else if !errors.Is(err, errNoRow) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the %s row: %w", tableOpenvSwitch, ctx.Err())
		case <-ch:
		}
	}
}

var errNoRow = errors.New("ovsconfig: the Open_vSwitch table has no row")

// readOVSRow copies the Open_vSwitch row out of ovs's cache.
func readOVSRow(ovs client.Client) (ovsRow, error) {
	tc := ovs.Cache()
	if tc == nil {
		return ovsRow{}, ErrNotConnected
	}
	rc := tc.Table(tableOpenvSwitch)
	if rc == nil {
		return ovsRow{}, errNoRow
	}
	// The schema allows at most one row.
	for _, m := range rc.RowsShallow() {
		r, ok := m.(*ovsRow)
		if !ok {
			return ovsRow{}, fmt.Errorf("ovsconfig: unexpected cache type %T for %s", m, tableOpenvSwitch)
		}
		out := *r
		out.OtherConfig = make(map[string]string, len(r.OtherConfig))
		for k, v := range r.OtherConfig {
			out.OtherConfig[k] = v
		}
		if r.OVSVersion != nil {
			v := *r.OVSVersion
			out.OVSVersion = &v
		}
		return out, nil
	}
	return ovsRow{}, errNoRow
}
