package mirror

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
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// runMirror owns the OpenFlow connection of one unmanaged bridge.
func (s *Set) runMirror(ctx context.Context, m *bridge) {
	log := s.log.With("bridge", m.name, "unmanaged", true)
	set := func(c *ofconn.Conn) {
		m.setConn(c)
		if c == nil {
			// A release may be waiting on this mirror's next connection.
			s.cfg.Recheck()
		}
	}
	s.cfg.KeepConnected(ctx, m.name, log, set, func(conn *ofconn.Conn) { s.serve(ctx, m, conn, log) })
}

// serve keeps the mirror of one bridge current until the connection
// dies, at a cost that follows change, not the bridge's size:
//
//  1. It asks the switch for a flow monitor (ofconn.MonitorFlows) before the
//     first dump, so no flow change after that dump goes unreported,
//     unless the vswitchd's version has none (before 3.0, SwitchInfo). A
//     bridge without one gets a full dump every MirrorInterval instead, on
//     the same connection; that is logged once per bridge, not per
//     connection.
//  2. The first dump may restore the mirror (restore); until it
//     settles, every interval dumps again.
//  3. After that, each MirrorInterval: if the monitor reported a change, or
//     the groups and meters (which OpenFlow cannot monitor, dumped alone:
//     cheap) differ from the last full dump's, dump everything and store
//     it (Store.SetMirror, itself a no-op when nothing changed). Otherwise
//     nothing: an idle bridge of 100,000 flows costs two small requests an
//     interval. The report is taken before the dump, so a change during
//     the dump is dumped again at the next interval.
func (s *Set) serve(ctx context.Context, m *bridge, conn *ofconn.Conn, log *slog.Logger) {
	var changed <-chan struct{}
	err := errNoMonitor
	if s.cfg.CanMonitor() {
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
	tick := time.NewTicker(s.cfg.Interval)
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
			actual, err := plan.DumpAll(ctx, conn)
			switch {
			case err != nil:
				dirty = true
				if ctx.Err() == nil && connAlive(conn) {
					log.Warn("dumping unmanaged bridge", "err", err)
				}
			case first:
				settled, restored := s.restore(ctx, m, conn, actual, log)
				if settled {
					first = false
					s.cfg.Recheck()
				}
				if !restored && settled {
					s.save(m, actual, log)
				}
				// Unsettled: try again. Restored: the switch now holds the
				// mirror, which the next dump stores as it is there.
				dirty = !settled || restored
			default:
				s.save(m, actual, log)
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
// (package restore's SwitchInfo), so none was asked for.
var errNoMonitor = errors.New("restore: this ovs-vswitchd version has no OpenFlow 1.5 flow monitor")

// dumpOthersHash dumps the groups and meters of a bridge alone and returns
// othersHash of them.
func dumpOthersHash(ctx context.Context, conn *ofconn.Conn) ([]byte, error) {
	groups, meters, err := plan.DumpGroupsAndMeters(ctx, conn)
	if err != nil {
		return nil, err
	}
	actual, err := plan.ActualEntries(nil, groups, meters)
	if err != nil {
		return nil, err
	}
	return othersHash(actual), nil
}

// othersHash is a SHA-256 over the groups and meters of actual in (kind,
// identity) order, each framed by its lengths; flows are left out.
func othersHash(actual []plan.ActualEntry) []byte {
	var others []plan.ActualEntry
	for _, a := range actual {
		if a.Kind != entry.KindFlow {
			others = append(others, a)
		}
	}
	slices.SortFunc(others, func(a, b plan.ActualEntry) int {
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return bytes.Compare(a.ID, b.ID)
	})
	h := sha256.New()
	var n [9]byte
	for _, a := range others {
		n[0] = byte(a.Kind)
		binary.BigEndian.PutUint32(n[1:], uint32(len(a.ID)))
		binary.BigEndian.PutUint32(n[5:], uint32(len(a.Payload)))
		h.Write(n[:])
		h.Write(a.ID)
		h.Write(a.Payload)
	}
	return h.Sum(nil)
}

// restore handles the first dump of a connection. settled is false
// when it could not decide yet (OVSDB unknown, the store unreadable, the
// connection failing): the next dump tries again.
//
// It keeps the flag pinned (Config.Pin) while it decides and applies, so the flag cannot be
// cleared between "vswitchd is held" and the bundle: flowstated never writes
// to an unmanaged bridge of a released vswitchd.
func (s *Set) restore(ctx context.Context, m *bridge, conn *ofconn.Conn, actual []plan.ActualEntry, log *slog.Logger) (settled, restored bool) {
	held, known, unpin := s.cfg.Pin()
	defer unpin()
	if !known {
		return false, false
	}
	if !held || !plan.Fresh(actual) {
		m.settle(false, nil)
		return true, false
	}
	want, ok, err := s.cfg.Store.Get(m.name)
	if err != nil {
		log.Error("reading the mirror of an unmanaged bridge", "err", err)
		return false, false
	}
	if !ok {
		m.settle(false, nil)
		return true, false
	}
	start := time.Now()
	p := plan.NewSendOrder(plan.Diff(want, actual, nil))
	r := plan.Replay{Entries: len(want)}
	r.Count(p.Changes())
	if p.Len() == 0 {
		m.settle(false, nil)
		return true, false
	}
	s.cfg.Publish(events.Event{Type: events.ReplayStarted, Bridge: m.name, Message: "restoring an unmanaged bridge from its mirror"})
	st, err := plan.ApplySendOrder(ctx, conn, p)
	r.Messages, r.Bytes = st.Messages, st.Bytes
	r.Finished = time.Now()
	r.Duration, r.Err = r.Finished.Sub(start), err
	s.cfg.ObserveReplay(m.name, r)
	attrs := map[string]string{
		"entries": strconv.Itoa(r.Entries), "adds": strconv.Itoa(r.Adds), "deletes": strconv.Itoa(r.Deletes),
		"modifies": strconv.Itoa(r.Modifies), "duration": r.Duration.String(), "unmanaged": "true",
	}
	var re *plan.RejectedError
	switch {
	case err == nil:
		log.Info("unmanaged bridge restored from its mirror", "entries", r.Entries, "adds", r.Adds,
			"deletes", r.Deletes, "duration", r.Duration)
		s.cfg.Publish(events.Event{Type: events.ReplayFinished, Bridge: m.name,
			Message: fmt.Sprintf("unmanaged bridge restored from its mirror: %d changes in %v", r.Changes(), r.Duration.Round(time.Microsecond)),
			Attrs:   attrs})
		m.settle(true, &r)
		return true, true
	case errors.As(err, &re):
		// What the switch held before, it takes again; if not, retrying
		// would only hold every bridge: give up, say so, forward as is.
		attrs["error"] = err.Error()
		log.Error("the switch refused the mirror of an unmanaged bridge; it comes back as vswitchd made it", "err", err)
		s.cfg.Publish(events.Event{Type: events.ReplayFinished, Bridge: m.name, Message: "restore of an unmanaged bridge refused", Attrs: attrs})
		m.settle(false, &r)
		return true, false
	default:
		log.Warn("restoring an unmanaged bridge, retrying", "err", err)
		return false, false
	}
}

// save stores the dump as the bridge's mirror (a no-op when unchanged).
func (s *Set) save(m *bridge, actual []plan.ActualEntry, log *slog.Logger) {
	es := make([]entry.Entry, len(actual))
	for i, a := range actual {
		es[i] = entry.Entry{Kind: a.Kind, ID: a.ID, Payload: a.Payload}
	}
	changed, err := s.cfg.Store.Set(m.name, es)
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
