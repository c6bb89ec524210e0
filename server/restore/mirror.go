package restore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// Unmanaged bridges.
//
// flow-restore-wait holds every bridge of vswitchd, not only the managed
// ones, and a vswitchd restarted under it brings every bridge back empty (a
// standalone one with the default NORMAL flow). ovs-save would have put an
// unmanaged bridge's flows back on a planned `ovs-ctl restart`; nothing does
// after a crash. So the engine keeps a mirror of every bridge OVSDB lists and
// Config.Bridges does not name, and restores it in the gated window:
//
//  1. runMirrors follows the Bridge table and owns one goroutine per
//     unmanaged bridge (runMirror): dial <bridge>.mgmt, dump flows, groups
//     and meters, and store the dump when it changed; then dump again only
//     after a flow monitor reported a change, or the groups and meters
//     (checked every MirrorInterval) changed (serveMirror).
//  2. The first dump of every connection decides first (restoreMirror): if
//     vswitchd is held (the flag is on and the vswitchd its pidfile names
//     has not been released, see vswitchdHeld: a bridge rebuilt on a
//     running vswitchd drops the connection too) and the bridge is fresh
//     (nothing but the default flow), the stored mirror is applied with
//     the replay machinery (diff, plan, one bundle). Only then does the dump refresh the mirror:
//     a post-restart empty bridge never overwrites what it must get back.
//  3. syncFlag waits for every mirror's first dump (mirrorsSettled),
//     each for at most MaxHold of holding the release, so one bridge that
//     cannot be restored never holds the others for long.
//
// Otherwise flowstated never writes to an unmanaged bridge.

// UnmanagedPolicy says what the engine does with bridges it does not manage.
type UnmanagedPolicy string

// The policies.
const (
	// UnmanagedPreserve mirrors unmanaged bridges and restores them after a
	// gated vswitchd restart (the default).
	UnmanagedPreserve UnmanagedPolicy = "preserve"
	// UnmanagedIgnore leaves them alone: they come back as vswitchd makes them.
	UnmanagedIgnore UnmanagedPolicy = "ignore"
)

// ParseUnmanagedPolicy parses "preserve" or "ignore"; "" is preserve.
func ParseUnmanagedPolicy(s string) (UnmanagedPolicy, error) {
	switch p := UnmanagedPolicy(s); p {
	case "":
		return UnmanagedPreserve, nil
	case UnmanagedPreserve, UnmanagedIgnore:
		return p, nil
	}
	return "", fmt.Errorf("unmanaged bridges policy %q: want preserve or ignore", s)
}

// Defaults of the mirror settings.
const (
	DefaultMirrorInterval = 2 * time.Second
)

// MirrorState is what the engine keeps of an unmanaged bridge.
type MirrorState struct {
	// Entries is the number of flows, groups and meters in the mirror.
	Entries int
	// Updated is when the stored mirror last changed (zero: not by this
	// flowstated).
	Updated time.Time
	// Restored is true when the current connection's first dump restored
	// the mirror onto the switch.
	Restored bool
	// Dumps counts the full dumps of the current connection, Quiet the
	// intervals that dumped none: no change reported (serveMirror).
	Dumps, Quiet int
}

// mirrorSet is the engine's mirrors, by bridge name.
type mirrorSet struct {
	mu     sync.Mutex
	byName map[string]*mirror
	// seenReleased is the vswitchd (vswitchdIdentity) last seen running
	// with the flag off and acknowledged (noteReleased); noIdentity is true
	// while vswitchd has no pidfile (logged once). Both guarded by flagMu.
	seenReleased string
	noIdentity   bool
	// holdTimer wakes the flag goroutine when a mirror's MaxHold expires.
	holdTimer *time.Timer
	closed    bool
}

// mirror is one unmanaged bridge. Its goroutine (runMirror) is the only
// writer of conn and the dump state; mirrorsSettled reads them.
type mirror struct {
	name string
	stop context.CancelFunc // nil while no goroutine runs
	done chan struct{}

	mu   sync.Mutex
	conn *ofconn.Conn
	// settled is true once the first dump of conn was handled: restored,
	// nothing to restore, or given up.
	settled bool
	// holding is when the mirror first held a release back while unsettled
	// (zero: it has not); after MaxHold it is not waited for.
	holding  time.Time
	gaveUp   bool
	entries  int
	updated  time.Time
	restored bool
	last     Replay
	// dumps and quiet count as MirrorState's Dumps and Quiet.
	dumps, quiet int
	// noMonitor is why the switch last refused a flow monitor ("": it did
	// not). Only runMirror's goroutine uses it: the refusal of a vswitchd
	// that cannot monitor is logged once, not at every connection.
	noMonitor string
}

func newMirrorSet() *mirrorSet { return &mirrorSet{byName: map[string]*mirror{}} }

// get returns the mirror of name, creating its state (not its goroutine).
func (s *mirrorSet) get(name string) *mirror {
	m := s.byName[name]
	if m == nil {
		m = &mirror{name: name}
		s.byName[name] = m
	}
	return m
}

func connAlive(c *ofconn.Conn) bool {
	if c == nil {
		return false
	}
	select {
	case <-c.Done():
		return false
	default:
		return true
	}
}

func (m *mirror) setConn(c *ofconn.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conn, m.settled, m.holding, m.gaveUp, m.restored = c, false, time.Time{}, false, false
	m.dumps, m.quiet = 0, 0
}

// count counts one interval of serveMirror: a full dump or a quiet one.
func (m *mirror) count(dumped bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if dumped {
		m.dumps++
	} else {
		m.quiet++
	}
}

func (m *mirror) settle(restored bool, r *Replay) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settled, m.holding, m.restored = true, time.Time{}, restored
	if r != nil {
		m.last = *r
	}
}

func (m *mirror) status() BridgeStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return BridgeStatus{
		Name: m.name, Connected: connAlive(m.conn), Converged: m.settled && connAlive(m.conn), Last: m.last,
		Mirror: &MirrorState{Entries: m.entries, Updated: m.updated, Restored: m.restored, Dumps: m.dumps, Quiet: m.quiet},
	}
}

// Mirrors returns the state of every mirrored (unmanaged) bridge, by name.
func (e *Engine) Mirrors() []BridgeStatus {
	e.mirrors.mu.Lock()
	ms := make([]*mirror, 0, len(e.mirrors.byName))
	for _, m := range e.mirrors.byName {
		if m.stop != nil {
			ms = append(ms, m)
		}
	}
	e.mirrors.mu.Unlock()
	out := make([]BridgeStatus, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.status())
	}
	slices.SortFunc(out, func(a, b BridgeStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// unmanaged returns the bridges of OVSDB this engine mirrors: not managed,
// and reachable over OpenFlow 1.5 (a bridge whose protocols exclude it can
// be neither dumped nor restored, so it holds nothing).
func (e *Engine) unmanaged(bridges []ovsconfig.Bridge) map[string]bool {
	out := map[string]bool{}
	for _, b := range bridges {
		if _, managed := e.bridges[b.Name]; managed || entry.ValidateName("bridge", b.Name) != nil {
			continue
		}
		if len(b.Protocols) > 0 && !slices.Contains(b.Protocols, "OpenFlow15") {
			continue
		}
		out[b.Name] = true
	}
	return out
}

// runMirrors starts and stops one goroutine per unmanaged bridge as the
// Bridge table changes, until ctx ends; then it stops them all.
func (e *Engine) runMirrors(ctx context.Context) {
	if e.cfg.Unmanaged == UnmanagedIgnore {
		return
	}
	var wg sync.WaitGroup
	defer func() {
		e.mirrors.mu.Lock()
		e.mirrors.closed = true
		if e.mirrors.holdTimer != nil {
			e.mirrors.holdTimer.Stop()
		}
		for _, m := range e.mirrors.byName {
			if m.stop != nil {
				m.stop()
			}
		}
		e.mirrors.mu.Unlock()
		wg.Wait()
	}()
	// The OVSDB goroutine dials; the mirrors start once it is connected.
	var c *ovsconfig.Client
	for c = e.ovsdb.Load(); c == nil; c = e.ovsdb.Load() {
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return
		}
	}
	skipped := map[string]bool{}
	for {
		changed := c.Changed()
		if bridges, err := c.Bridges(); err == nil {
			e.syncMirrors(ctx, &wg, bridges, skipped)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// syncMirrors makes the running mirrors those of the unmanaged bridges, and
// forgets the stored mirrors of bridges OVSDB no longer has.
func (e *Engine) syncMirrors(ctx context.Context, wg *sync.WaitGroup, bridges []ovsconfig.Bridge, skipped map[string]bool) {
	want := e.unmanaged(bridges)
	inDB := map[string]bool{}
	for _, b := range bridges {
		inDB[b.Name] = true
		if _, managed := e.bridges[b.Name]; !managed && !want[b.Name] && !skipped[b.Name] {
			skipped[b.Name] = true
			e.log.Warn("unmanaged bridge not mirrored: its protocols exclude OpenFlow 1.5, so it comes back from a vswitchd restart as vswitchd makes it",
				"bridge", b.Name, "protocols", b.Protocols)
		}
	}
	var stopped []*mirror
	e.mirrors.mu.Lock()
	for name := range want {
		m := e.mirrors.get(name)
		if m.stop == nil {
			mctx, cancel := context.WithCancel(ctx)
			m.stop, m.done = cancel, make(chan struct{})
			wg.Go(func() {
				defer close(m.done)
				e.runMirror(mctx, m)
			})
		}
	}
	for name, m := range e.mirrors.byName {
		if !want[name] {
			if m.stop != nil {
				m.stop()
				stopped = append(stopped, m)
			}
			delete(e.mirrors.byName, name)
		}
	}
	e.mirrors.mu.Unlock()
	for _, m := range stopped {
		<-m.done
	}
	stored, err := e.cfg.Store.Mirrors().Bridges()
	if err != nil {
		e.log.Error("listing mirrors", "err", err)
		return
	}
	for _, name := range stored {
		if !inDB[name] {
			if err := e.cfg.Store.Mirrors().Delete(name); err != nil {
				e.log.Error("forgetting the mirror of a deleted bridge", "bridge", name, "err", err)
				continue
			}
			e.log.Info("bridge deleted from OVSDB: mirror forgotten", "bridge", name)
		}
	}
}

// runMirror owns the OpenFlow connection of one unmanaged bridge.
func (e *Engine) runMirror(ctx context.Context, m *mirror) {
	log := e.log.With("bridge", m.name, "unmanaged", true)
	set := func(c *ofconn.Conn) {
		m.setConn(c)
		if c == nil {
			// A release may be waiting on this mirror's next connection.
			e.signalRecheck()
		}
	}
	e.keepConnected(ctx, m.name, log, connHooks{
		set:   func(c *ofconn.Conn, _ string) { set(c) },
		serve: func(conn *ofconn.Conn) { e.serveMirror(ctx, m, conn, log) },
	})
}

// serveMirror keeps the mirror of one bridge current until the connection
// dies, at a cost that follows change, not the bridge's size:
//
//  1. It asks the switch for a flow monitor (ofconn.MonitorFlows) before the
//     first dump, so no flow change after that dump goes unreported,
//     unless the vswitchd's version has none (before 3.0, SwitchInfo). A
//     bridge without one gets a full dump every MirrorInterval instead, on
//     the same connection; that is logged once per bridge, not per
//     connection.
//  2. The first dump may restore the mirror (restoreMirror); until it
//     settles, every interval dumps again.
//  3. After that, each MirrorInterval: if the monitor reported a change, or
//     the groups and meters (which OpenFlow cannot monitor, dumped alone:
//     cheap) differ from the last full dump's, dump everything and store
//     it (Mirrors.Set, itself a no-op when nothing changed). Otherwise
//     nothing: an idle bridge of 100,000 flows costs two small requests an
//     interval. The report is taken before the dump, so a change during
//     the dump is dumped again at the next interval.
func (e *Engine) serveMirror(ctx context.Context, m *mirror, conn *ofconn.Conn, log *slog.Logger) {
	var changed <-chan struct{}
	err := errNoMonitor
	if e.canMonitor() {
		changed, err = conn.MonitorFlows(ctx)
	}
	switch {
	case err == nil:
		m.noMonitor = ""
	case ctx.Err() != nil || !connAlive(conn):
		return
	case err.Error() != m.noMonitor:
		m.noMonitor = err.Error()
		why := "the switch cannot monitor flows"
		if _, ok := errors.AsType[*ofconn.ForeignError](err); ok || errors.Is(err, errNoMonitor) {
			why = "the switch cannot monitor flows (Open vSwitch before 3.0 has no OpenFlow 1.5 flow monitor)"
		}
		log.Warn(why+": the unmanaged bridge is dumped every --mirror-interval instead", "err", err)
	default:
		log.Debug("the switch cannot monitor flows", "err", err)
	}
	tick := time.NewTicker(e.cfg.MirrorInterval)
	defer tick.Stop()
	first, dirty := true, true
	var others []byte // hash of the groups and meters of the last full dump
	for {
		select {
		case <-changed: // a nil channel (no monitor) never reports
			dirty = true
		default:
		}
		if !dirty && changed != nil {
			h, err := dumpOthersHash(ctx, conn)
			switch {
			case err != nil:
				if ctx.Err() == nil && connAlive(conn) {
					log.Warn("dumping the groups and meters of an unmanaged bridge", "err", err)
				}
			case !bytes.Equal(h, others):
				dirty = true
			}
		}
		m.count(dirty || changed == nil)
		if dirty || changed == nil {
			dirty = false
			actual, err := dumpAll(ctx, conn)
			switch {
			case err != nil:
				dirty = true
				if ctx.Err() == nil && connAlive(conn) {
					log.Warn("dumping unmanaged bridge", "err", err)
				}
			case first:
				settled, restored := e.restoreMirror(ctx, m, conn, actual, log)
				if settled {
					first = false
					e.signalRecheck()
				}
				if !restored && settled {
					e.saveMirror(m, actual, log)
				}
				// Unsettled: try again. Restored: the switch now holds the
				// mirror, which the next dump stores as it is there.
				dirty = !settled || restored
			default:
				e.saveMirror(m, actual, log)
			}
			if err == nil {
				others = othersHash(actual)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
			return
		case <-tick.C:
		}
	}
}

// errNoMonitor: the vswitchd's version has no OpenFlow 1.5 flow monitor
// (SwitchInfo), so none was asked for.
var errNoMonitor = errors.New("restore: this ovs-vswitchd version has no OpenFlow 1.5 flow monitor")

// dumpOthersHash dumps the groups and meters of a bridge alone and returns
// othersHash of them.
func dumpOthersHash(ctx context.Context, conn *ofconn.Conn) ([]byte, error) {
	groups, meters, err := dumpGroupsAndMeters(ctx, conn)
	if err != nil {
		return nil, err
	}
	actual, err := actualEntries(nil, groups, meters)
	if err != nil {
		return nil, err
	}
	return othersHash(actual), nil
}

// othersHash is a SHA-256 over the groups and meters of actual in (kind,
// identity) order, each framed by its lengths; flows are left out.
func othersHash(actual []actualEntry) []byte {
	var others []actualEntry
	for _, a := range actual {
		if a.kind != entry.KindFlow {
			others = append(others, a)
		}
	}
	slices.SortFunc(others, func(a, b actualEntry) int {
		if c := cmp.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		return bytes.Compare(a.id, b.id)
	})
	h := sha256.New()
	var n [9]byte
	for _, a := range others {
		n[0] = byte(a.kind)
		binary.BigEndian.PutUint32(n[1:], uint32(len(a.id)))
		binary.BigEndian.PutUint32(n[5:], uint32(len(a.payload)))
		h.Write(n[:])
		h.Write(a.id)
		h.Write(a.payload)
	}
	return h.Sum(nil)
}

// restoreMirror handles the first dump of a connection. settled is false
// when it could not decide yet (OVSDB unknown, the store unreadable, the
// connection failing): the next dump tries again.
//
// It holds flagMu while it decides and applies, so the flag cannot be
// cleared between "vswitchd is held" and the bundle: flowstated never writes
// to an unmanaged bridge of a released vswitchd.
func (e *Engine) restoreMirror(ctx context.Context, m *mirror, conn *ofconn.Conn, actual []actualEntry, log *slog.Logger) (settled, restored bool) {
	e.flagMu.Lock()
	defer e.flagMu.Unlock()
	held, known := e.vswitchdHeld()
	if !known {
		return false, false
	}
	if !held || !fresh(actual) {
		m.settle(false, nil)
		return true, false
	}
	want, ok, err := e.cfg.Store.Mirrors().Get(m.name)
	if err != nil {
		log.Error("reading the mirror of an unmanaged bridge", "err", err)
		return false, false
	}
	if !ok {
		m.settle(false, nil)
		return true, false
	}
	start := time.Now()
	p := newSendOrder(diff(want, actual, nil))
	r := Replay{Entries: len(want)}
	r.count(p.changes())
	if p.len() == 0 {
		m.settle(false, nil)
		return true, false
	}
	e.publish(events.Event{Type: events.ReplayStarted, Bridge: m.name, Message: "restoring an unmanaged bridge from its mirror"})
	st, err := applySendOrder(ctx, conn, p)
	r.Messages, r.Bytes = st.messages, st.bytes
	r.Finished = time.Now()
	r.Duration, r.Err = r.Finished.Sub(start), err
	e.cfg.Metrics.observeReplay(m.name, r)
	attrs := map[string]string{
		"entries": strconv.Itoa(r.Entries), "adds": strconv.Itoa(r.Adds), "deletes": strconv.Itoa(r.Deletes),
		"modifies": strconv.Itoa(r.Modifies), "duration": r.Duration.String(), "unmanaged": "true",
	}
	var re *RejectedError
	switch {
	case err == nil:
		log.Info("unmanaged bridge restored from its mirror", "entries", r.Entries, "adds", r.Adds,
			"deletes", r.Deletes, "duration", r.Duration)
		e.publish(events.Event{Type: events.ReplayFinished, Bridge: m.name,
			Message: fmt.Sprintf("unmanaged bridge restored from its mirror: %d changes in %v", r.Changes(), r.Duration.Round(time.Microsecond)),
			Attrs:   attrs})
		m.settle(true, &r)
		return true, true
	case errors.As(err, &re):
		// What the switch held before, it takes again; if not, retrying
		// would only hold every bridge: give up, say so, forward as is.
		attrs["error"] = err.Error()
		log.Error("the switch refused the mirror of an unmanaged bridge; it comes back as vswitchd made it", "err", err)
		e.publish(events.Event{Type: events.ReplayFinished, Bridge: m.name, Message: "restore of an unmanaged bridge refused", Attrs: attrs})
		m.settle(false, &r)
		return true, false
	default:
		log.Warn("restoring an unmanaged bridge, retrying", "err", err)
		return false, false
	}
}

// saveMirror stores the dump as the bridge's mirror (a no-op when unchanged).
func (e *Engine) saveMirror(m *mirror, actual []actualEntry, log *slog.Logger) {
	es := make([]entry.Entry, len(actual))
	for i, a := range actual {
		es[i] = entry.Entry{Kind: a.kind, ID: a.id, Payload: a.payload}
	}
	changed, err := e.cfg.Store.Mirrors().Set(m.name, es)
	if err != nil {
		log.Error("storing the mirror of an unmanaged bridge", "err", err)
		return
	}
	m.mu.Lock()
	m.entries = len(es)
	if changed {
		m.updated = time.Now()
	}
	m.mu.Unlock()
	if changed {
		log.Debug("mirror of unmanaged bridge updated", "entries", len(es))
	}
}

// fresh reports whether a bridge holds only what vswitchd puts on a new
// bridge: nothing, or the default NORMAL flow. A bridge that holds more was
// written since vswitchd started: by the operator or another tool, and it is
// not flowstated's to overwrite.
func fresh(actual []actualEntry) bool {
	for _, a := range actual {
		if a.kind != entry.KindFlow || !canon.IsDefaultFlow(a.payload) {
			return false
		}
	}
	return true
}

// mirrorsSettled reports whether every unmanaged bridge of c has handled the
// first dump of its current connection, so flow-restore-wait may be
// cleared. A mirror that holds the release back for longer than MaxHold is
// not waited for any more (until its next connection); the hold timer wakes
// the flag goroutine when that happens. flagMu must be held.
func (e *Engine) mirrorsSettled(c *ovsconfig.Client) bool {
	if e.cfg.Unmanaged == UnmanagedIgnore {
		return true
	}
	bridges, err := c.Bridges()
	if err != nil {
		return false
	}
	now := time.Now()
	var wait time.Duration
	e.mirrors.mu.Lock()
	defer e.mirrors.mu.Unlock()
	for name := range e.unmanaged(bridges) {
		m := e.mirrors.get(name)
		m.mu.Lock()
		switch {
		case m.settled && connAlive(m.conn), m.gaveUp:
		default:
			if m.holding.IsZero() {
				m.holding = now
			}
			if left := e.cfg.MaxHold - now.Sub(m.holding); left > 0 {
				if wait == 0 || left < wait {
					wait = left
				}
			} else {
				m.gaveUp = true
				e.log.Error("unmanaged bridge not restored within the max hold; releasing the switch without it",
					"bridge", name, "max_hold", e.cfg.MaxHold)
			}
		}
		m.mu.Unlock()
	}
	if wait == 0 {
		return true
	}
	if !e.mirrors.closed {
		if e.mirrors.holdTimer == nil {
			e.mirrors.holdTimer = time.AfterFunc(wait, e.signalRecheck)
		} else {
			e.mirrors.holdTimer.Reset(wait)
		}
	}
	return false
}
