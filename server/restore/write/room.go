package write

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/store"
)

// Writes runs the writes of the managed bridges: per bridge a queue and its
// owner (Run), and the transaction every write runs in (txn.go).
type Writes struct {
	cfg     Config
	log     *slog.Logger
	bridges map[string]*bridgeQueue
	order   []string
}

// bridgeQueue is one bridge's state and its write queue.
type bridgeQueue struct {
	*bridge.State
	name   string
	writes writeQueue
}

// Name is the bridge's name, which never changes: a write's labels and logs
// read it here, not from the bridge's state.
func (b *bridgeQueue) Name() string { return b.name }

// Config wires Writes. Every field but Faults is required.
type Config struct {
	Store *store.Store
	// Bridges are the states of the managed bridges, in flag order.
	Bridges []*bridge.State
	// Forms are the switch's forms of opaque entries (package forms),
	// shared with the replay.
	Forms *canon.Forms
	// OwnedCookie is the cookie space whose flows writes may declare.
	OwnedCookie entry.CookieSpace
	// WriteTimeout bounds the switch I/O of one transaction (restore.Config).
	WriteTimeout time.Duration
	// Gate is the cold-start gate (gate.Gate).
	Gate    Gate
	Rooms   Rooms
	Faults  Faults
	Metrics Metrics
	Logger  *slog.Logger
}

// Gate is the cold-start gate as the writes use it (gate.Gate).
type Gate interface {
	// IsOpen reports whether replays, and so live writes, may run.
	IsOpen() bool
	// MarkReady marks module ready for this boot.
	MarkReady(module string) error
}

// Rooms is what a write asks of the engine's other rooms: the modules'
// readiness, the running vswitchd's name, and the controllers that
// connect through the proxy.
type Rooms interface {
	// Ready reports whether module marked itself ready for this boot.
	Ready(module string) (bool, error)
	// Vswitchd names the running ovs-vswitchd with its version, for the
	// refusals it makes.
	Vswitchd() string
	// ControllerConnected tells that module's controller connected
	// through flowstated's proxy to bridge (Recorder.Connected).
	ControllerConnected(bridge, module string)
}

// Faults injects faults into the write path, for tests (restore.Faults);
// nil in production, where noFaults stands in for it.
type Faults interface {
	// Taken is told the size of every batch the owner takes.
	Taken(n int)
	// Verdict may replace the switch's verdict err on a bundle.
	Verdict(err error, streamed bool) error
	// BeforeStoreCommit may fail a transaction before its store commits
	// (a pipe's: once the switch took it, which undoes its commit).
	BeforeStoreCommit() error
	// BeforeUndo is told when a pipe's committed transaction is about to
	// be taken back after the switch refused it.
	BeforeUndo()
	// Pipes reports whether Puts may be pipelined.
	Pipes() bool
	// Piped is told the size of every batch a pipe takes.
	Piped(n int)
}

// noFaults is the write path's Faults when the config has none: a write in
// production calls no hook of the tests' (restore/faults.go).
type noFaults struct{}

func (noFaults) Taken(int)                       {}
func (noFaults) Verdict(err error, _ bool) error { return err }
func (noFaults) BeforeStoreCommit() error        { return nil }
func (noFaults) BeforeUndo()                     {}
func (noFaults) Pipes() bool                     { return true }
func (noFaults) Piped(int)                       {}

// Metrics are the write counters, by bridge (WriteRequests also by result).
type Metrics struct {
	WriteRequests, WriteBatches, StagedWrites *prometheus.CounterVec
}

// New returns the writes of cfg.Bridges, not running yet.
func New(cfg Config) *Writes {
	if cfg.Faults == nil {
		cfg.Faults = noFaults{}
	}
	ws := &Writes{cfg: cfg, log: cfg.Logger, bridges: make(map[string]*bridgeQueue, len(cfg.Bridges))}
	for _, b := range cfg.Bridges {
		ws.bridges[b.Name()] = &bridgeQueue{State: b, name: b.Name(), writes: newWriteQueue()}
		ws.order = append(ws.order, b.Name())
	}
	return ws
}

// Run runs the owner of every bridge's queue until ctx is cancelled, then
// fails the requests still queued.
func (ws *Writes) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, name := range ws.order {
		b := ws.bridges[name]
		wg.Go(func() { ws.runWrites(ctx, b) })
	}
	wg.Wait()
}

// Queued is the number of requests waiting for bridge's owner.
func (ws *Writes) Queued(bridge string) int {
	b, ok := ws.bridges[bridge]
	if !ok {
		return 0
	}
	b.writes.mu.Lock()
	defer b.writes.mu.Unlock()
	return len(b.writes.reqs)
}

func (ws *Writes) bridge(name string) (*bridgeQueue, error) {
	b, ok := ws.bridges[name]
	if !ok {
		return nil, bridge.NotManaged(name)
	}
	return b, nil
}
