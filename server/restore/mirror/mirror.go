package mirror

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// Policy says what flowstated does with bridges it does not manage.
type Policy string

// The policies.
const (
	// Preserve mirrors unmanaged bridges and restores them after a gated
	// vswitchd restart (the default).
	Preserve Policy = "preserve"
	// Ignore leaves them alone: they come back as vswitchd makes them.
	Ignore Policy = "ignore"
)

// ParsePolicy parses "preserve" or "ignore"; "" is preserve.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case "":
		return Preserve, nil
	case Preserve, Ignore:
		return p, nil
	}
	return "", fmt.Errorf("unmanaged bridges policy %q: want preserve or ignore", s)
}

// DefaultInterval is the default of Config.Interval.
const DefaultInterval = 2 * time.Second

// State is what a Set keeps of an unmanaged bridge.
type State struct {
	// Entries is the number of flows, groups and meters in the mirror.
	Entries int
	// Updated is when the stored mirror last changed (zero: not by this
	// flowstated).
	Updated time.Time
	// Restored is true when the current connection's first dump restored
	// the mirror onto the switch.
	Restored bool
	// Dumps counts the full dumps of the current connection, Quiet the
	// intervals that dumped none: no change reported (serve).
	Dumps, Quiet int
}

// Status is the state of one mirrored bridge.
type Status struct {
	Name      string
	Connected bool
	// Converged is true once the first dump of the current connection was
	// handled.
	Converged bool
	// Last is the last restore from the mirror.
	Last  plan.Replay
	State State
}

// Store holds the mirrors (package store's methods of that name).
type Store interface {
	Get(bridge string) ([]entry.Entry, bool, error)
	Set(bridge string, es []entry.Entry) (bool, error)
	Bridges() ([]string, error)
	Delete(bridge string) error
}

// Config is what a Set needs of its caller.
type Config struct {
	Policy Policy
	// Interval is how often a mirror checks for change (and dumps after
	// one).
	Interval time.Duration
	// MaxHold is how long an unsettled mirror holds the release back.
	MaxHold time.Duration
	Store   Store
	Logger  *slog.Logger
	// Managed reports whether flowstated manages bridge (it is not
	// mirrored).
	Managed func(bridge string) bool
	// OVSDB is the OVSDB client, nil until it is connected.
	OVSDB func() *ovsconfig.Client
	// Pin reports whether the running vswitchd may still be held by
	// flow-restore-wait, and whether that is known, and holds the flag
	// unchanged until unpin: a restore decides and applies under it.
	Pin func() (held, known bool, unpin func())
	// Recheck asks the flag to decide again whether it may be cleared.
	Recheck func()
	// KeepConnected owns the OpenFlow connection of bridge until ctx ends:
	// set records each connection and its loss (nil), serve uses it until
	// it dies.
	KeepConnected func(ctx context.Context, bridge string, log *slog.Logger, set func(*ofconn.Conn), serve func(*ofconn.Conn))
	// CanMonitor reports whether the running vswitchd may take a flow
	// monitor.
	CanMonitor func() bool
	// Publish sends an event; ObserveReplay records a restore's metrics.
	Publish       func(events.Event)
	ObserveReplay func(bridge string, r plan.Replay)
}

// Set is the mirrors of the unmanaged bridges, by bridge name.
type Set struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	byName map[string]*bridge
	// holdTimer wakes the flag when a mirror's MaxHold expires.
	holdTimer *time.Timer
	closed    bool
}

// New returns a Set that mirrors nothing until Run.
func New(cfg Config) *Set {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	return &Set{cfg: cfg, log: cfg.Logger, byName: map[string]*bridge{}}
}

// get returns the mirror of name, creating its state (not its goroutine).
func (s *Set) get(name string) *bridge {
	m := s.byName[name]
	if m == nil {
		m = &bridge{name: name}
		s.byName[name] = m
	}
	return m
}

// Status returns the state of every mirrored bridge, by name.
func (s *Set) Status() []Status {
	s.mu.Lock()
	ms := make([]*bridge, 0, len(s.byName))
	for _, m := range s.byName {
		if m.stop != nil {
			ms = append(ms, m)
		}
	}
	s.mu.Unlock()
	out := make([]Status, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.status())
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// unmanaged returns the bridges of OVSDB this Set mirrors: not managed, and
// reachable over OpenFlow 1.5 (a bridge whose protocols exclude it can be
// neither dumped nor restored, so it holds nothing).
func (s *Set) unmanaged(bridges []ovsconfig.Bridge) map[string]bool {
	out := map[string]bool{}
	for _, b := range bridges {
		if s.cfg.Managed(b.Name) || entry.ValidateName("bridge", b.Name) != nil {
			continue
		}
		if len(b.Protocols) > 0 && !slices.Contains(b.Protocols, "OpenFlow15") {
			continue
		}
		out[b.Name] = true
	}
	return out
}

// Run starts and stops one goroutine per unmanaged bridge as the Bridge
// table changes, until ctx ends; then it stops them all.
func (s *Set) Run(ctx context.Context) {
	if s.cfg.Policy == Ignore {
		return
	}
	var wg sync.WaitGroup
	defer func() {
		s.mu.Lock()
		s.closed = true
		if s.holdTimer != nil {
			s.holdTimer.Stop()
		}
		for _, m := range s.byName {
			if m.stop != nil {
				m.stop()
			}
		}
		s.mu.Unlock()
		wg.Wait()
	}()
	// The OVSDB goroutine dials; the mirrors start once it is connected.
	var c *ovsconfig.Client
	for c = s.cfg.OVSDB(); c == nil; c = s.cfg.OVSDB() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	skipped := map[string]bool{}
	for {
		changed := c.Changed()
		if bridges, err := c.Bridges(); err == nil {
			s.sync(ctx, &wg, bridges, skipped)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// sync makes the running mirrors those of the unmanaged bridges, and
// forgets the stored mirrors of bridges OVSDB no longer has.
func (s *Set) sync(ctx context.Context, wg *sync.WaitGroup, bridges []ovsconfig.Bridge, skipped map[string]bool) {
	want := s.unmanaged(bridges)
	inDB := map[string]bool{}
	for _, b := range bridges {
		inDB[b.Name] = true
		if !s.cfg.Managed(b.Name) && !want[b.Name] && !skipped[b.Name] {
			skipped[b.Name] = true
			s.log.Warn("unmanaged bridge not mirrored: its protocols exclude OpenFlow 1.5, so it comes back from a vswitchd restart as vswitchd makes it",
				"bridge", b.Name, "protocols", b.Protocols)
		}
	}
	var stopped []*bridge
	s.mu.Lock()
	for name := range want {
		m := s.get(name)
		if m.stop == nil {
			mctx, cancel := context.WithCancel(ctx)
			m.stop, m.done = cancel, make(chan struct{})
			wg.Go(func() {
				defer close(m.done)
				s.runMirror(mctx, m)
			})
		}
	}
	for name, m := range s.byName {
		if !want[name] {
			if m.stop != nil {
				m.stop()
				stopped = append(stopped, m)
			}
			delete(s.byName, name)
		}
	}
	s.mu.Unlock()
	for _, m := range stopped {
		<-m.done
	}
	stored, err := s.cfg.Store.Bridges()
	if err != nil {
		s.log.Error("listing mirrors", "err", err)
		return
	}
	for _, name := range stored {
		if !inDB[name] {
			if err := s.cfg.Store.Delete(name); err != nil {
				s.log.Error("forgetting the mirror of a deleted bridge", "bridge", name, "err", err)
				continue
			}
			s.log.Info("bridge deleted from OVSDB: mirror forgotten", "bridge", name)
		}
	}
}

// Settled reports whether every unmanaged bridge of c has handled the first
// dump of its current connection, so flow-restore-wait may be cleared. A
// mirror that holds the release back for longer than MaxHold is not waited
// for any more (until its next connection); the hold timer calls Recheck
// when that happens. It runs pinned (Config.Pin).
func (s *Set) Settled(c *ovsconfig.Client) bool {
	if s.cfg.Policy == Ignore {
		return true
	}
	bridges, err := c.Bridges()
	if err != nil {
		return false
	}
	now := time.Now()
	var wait time.Duration
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.unmanaged(bridges) {
		m := s.get(name)
		m.mu.Lock()
		switch {
		case m.settled && connAlive(m.conn), m.gaveUp:
		default:
			if m.holding.IsZero() {
				m.holding = now
			}
			if left := s.cfg.MaxHold - now.Sub(m.holding); left > 0 {
				if wait == 0 || left < wait {
					wait = left
				}
			} else {
				m.gaveUp = true
				s.log.Error("unmanaged bridge not restored within the max hold; releasing the switch without it",
					"bridge", name, "max_hold", s.cfg.MaxHold)
			}
		}
		m.mu.Unlock()
	}
	if wait == 0 {
		return true
	}
	if !s.closed {
		if s.holdTimer == nil {
			s.holdTimer = time.AfterFunc(wait, s.cfg.Recheck)
		} else {
			s.holdTimer.Reset(wait)
		}
	}
	return false
}
