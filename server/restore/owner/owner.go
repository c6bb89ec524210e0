package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// Keys of a managed bridge's OVSDB external_ids.
const (
	// ExternalIDStore is the id of the store (store.Store.ID) that manages
	// the bridge, written when a flowstated first manages it.
	ExternalIDStore = "flowstate-store"
	// ExternalIDInstance describes that flowstated (pid, host, socket), for
	// messages only.
	ExternalIDInstance = "flowstate-instance"
)

// ownerState says whether this engine may change a bridge: it claimed it
// (claim), or why it stands aside.
type ownerState struct {
	claimed atomic.Bool
	// refused is the message of the last refusal ("" when none).
	refused atomic.Pointer[string]
}

// standingAside reports whether this engine refused the bridge and has not
// claimed it since.
func (o *ownerState) standingAside() bool {
	return o.refused.Load() != nil && !o.claimed.Load()
}

// check fails replays of a bridge this engine has not claimed.
func (o *ownerState) check(bridge string) error {
	if o.claimed.Load() {
		return nil
	}
	if why := o.refused.Load(); why != nil {
		return fmt.Errorf("restore: %s: %w", *why, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("restore: bridge %s: this flowstated has not yet checked which store manages it: %w", bridge, errdefs.ErrUnavailable)
}

// claim decides, before the first replay of b, whether this store may manage
// it, and returns once it may (true), or when conn or ctx end (false). A
// replay makes the switch equal to the store, so it deletes every flow the
// store does not declare: run from a store that is new, lost or another
// instance's, it would wipe a bridge still forwarding with the flows of an
// earlier flowstated. The record is in OVSDB, where every flowstated of the
// host sees it, and in the store:
//
//  1. OVSDB's external_ids:flowstate-store of the bridge names this store:
//     claim.
//  2. It names another store: stand aside (nothing is sent to the bridge,
//     writes are stored only, status says why and what to do), unless
//     TakeOver, or until an operator writes this store's id there.
//  3. It names none (a new bridge, or one of a flowstated that did not
//     record it): stand aside if this store stood aside from the bridge
//     before (step 5); else claim if this store managed the bridge before,
//     or holds entries for it, or if the bridge holds nothing but the
//     default flow; else stand aside as in 2.
//  4. On claim, write this store's id and this instance into OVSDB, record
//     in the store that it manages the bridge, and forget any decision to
//     stand aside.
//  5. On standing aside, record the decision in the store: a vswitchd
//     restart empties the bridge, and the empty bridge must not then be
//     claimed for this store's state (the controller that owns it
//     reinstalls its flows). Only an operator ends it: this store's id in
//     OVSDB, or TakeOver.
//
// One live flowstated per bridge is ensured before, by LockBridges.
func (ow *Owners) claim(ctx context.Context, b *bridgeOwner, conn *ofconn.Conn, log *slog.Logger) bool {
	if b.owner.claimed.Load() {
		return true
	}
	ours := ow.cfg.Store.Identity().ID()
	tick := time.NewTicker(ow.cfg.RetryInterval)
	defer tick.Stop()
	undeclared := -1 // entries on the switch this store never declared; -1: not counted yet
	// The record is in OVSDB: wait for its first connection without
	// polling, since a held vswitchd waits for this replay.
	select {
	case <-ow.cfg.Flag.OVSDBUp():
	case <-ctx.Done():
		return false
	case <-conn.Done():
		return false
	}
	for {
		why, err := ow.claimOnce(ctx, b, conn, ours, &undeclared)
		switch {
		case err == nil && why == "":
			b.owner.refused.Store(nil)
			log.Info("bridge claimed for this store", "store", ours)
			return true
		case err != nil:
			b.SetReason("checking which store manages the bridge: " + err.Error())
		default:
			if prev := b.owner.refused.Swap(&why); prev == nil || *prev != why {
				log.Error("standing aside: this flowstated will not change the bridge", "reason", why)
				ow.cfg.StandingAside.WithLabelValues(b.Name()).Set(1)
				ow.cfg.Publish(events.Event{Type: events.BridgeStoodAside, Bridge: b.Name(), Message: why})
			}
			b.SetReason(why)
		}
		select {
		case <-ctx.Done():
			return false
		case <-conn.Done():
			return false
		case <-tick.C:
		}
	}
}

// claimOnce runs one round of claim: it returns "" once the bridge is
// claimed, the reason to stand aside, or an error to retry after.
func (ow *Owners) claimOnce(ctx context.Context, b *bridgeOwner, conn *ofconn.Conn, ours string, undeclared *int) (string, error) {
	c := ow.cfg.Flag.OVSDB()
	if c == nil || !c.Connected() {
		return "", errors.New("restore: waiting for OVSDB")
	}
	brs, err := c.Bridges()
	if err != nil {
		return "", err
	}
	recorded, instance, found := "", "", false
	for _, br := range brs {
		if br.Name == b.Name() {
			recorded, instance, found = br.ExternalIDs[ExternalIDStore], br.ExternalIDs[ExternalIDInstance], true
		}
	}
	if !found {
		return "", errors.New("restore: the bridge is not in OVSDB")
	}
	howTo := fmt.Sprintf("If this store should hold the bridge's state, stop flowstated, restore the store's backup to %s and start again. "+
		"To make this store manage the bridge, its flows not declared here being deleted at the first replay, "+
		"let the controllers re-sync their modules (writes are stored meanwhile), then run "+
		"`ovs-vsctl set Bridge %s external_ids:%s=%s`, or restart flowstated once with --take-over (docs/operations.md, \"Store identity\")",
		ow.cfg.Store.Path(), b.Name(), ExternalIDStore, ours)
	switch {
	case recorded == ours:
	case ow.cfg.TakeOver:
		ow.log.Warn("taking over the bridge (--take-over): flows this store does not declare will be deleted",
			"bridge", b.Name(), "previous_store", recorded, "store", ours)
	case recorded != "":
		if instance == "" {
			instance = "an unknown instance"
		}
		why := fmt.Sprintf("bridge %s was last managed by another flowstate store (%s, by %s), not this one (%s): "+
			"the store is new, was lost, or is another instance's; flowstated stands aside and deletes nothing there. %s",
			b.Name(), recorded, instance, ours, howTo)
		// OVSDB's record is the reason; the store's keeps it should
		// OVSDB's go.
		if _, err := ow.recordStoodAside(b, why); err != nil {
			return "", err
		}
		return why, nil
	default:
		aside, err := ow.cfg.Store.Identity().StoodAsideBridges()
		if err != nil {
			return "", err
		}
		if a, ok := aside[b.Name()]; ok {
			return a.Reason, nil
		}
		managed, err := ow.cfg.Store.Identity().Managed(b.Name())
		if err != nil {
			return "", err
		}
		if !managed {
			if *undeclared < 0 {
				n, err := ow.undeclaredEntries(ctx, b, conn)
				if err != nil {
					return "", err
				}
				*undeclared = n
			}
			if *undeclared > 0 {
				return ow.recordStoodAside(b, fmt.Sprintf("bridge %s holds %d flows, groups or meters, and this store (%s) never managed it: "+
					"flowstated stands aside and deletes nothing there. %s", b.Name(), *undeclared, ours, howTo))
			}
		}
	}
	if recorded != ours || instance != ow.cfg.Instance {
		err := c.SetBridgeExternalIDs(ctx, b.Name(), map[string]string{ExternalIDStore: ours, ExternalIDInstance: ow.cfg.Instance})
		if err != nil {
			return "", err
		}
	}
	if err := ow.cfg.Store.Identity().MarkManaged(b.Name(), time.Now()); err != nil {
		return "", err
	}
	if err := ow.cfg.Store.Identity().ClearStoodAside(b.Name()); err != nil {
		return "", err
	}
	b.owner.claimed.Store(true)
	ow.cfg.StandingAside.WithLabelValues(b.Name()).Set(0)
	return "", nil
}

// recordStoodAside keeps the decision to stand aside from b in the store
// (step 5 of claim) and returns the reason of the decision kept: the first
// one, which later rounds and restarts repeat.
func (ow *Owners) recordStoodAside(b *bridgeOwner, why string) (string, error) {
	now := time.Now()
	kept, err := ow.cfg.Store.Identity().SetStoodAside(b.Name(), store.StoodAside{Since: now, Reason: why +
		" This decision is kept in the store (since " + now.UTC().Format(time.RFC3339) + ") across restarts of vswitchd and " +
		"flowstated, also once the bridge is empty, until the bridge is adopted as above."})
	if err != nil {
		return "", err
	}
	return kept.Reason, nil
}

// loadStoodAside restores the decisions to stand aside that the store keeps
// (claim, step 5), so that from the start nothing is armed or replayed for
// those bridges.
//
// With TakeOver they are not restored: the operator adopts the bridges, the
// claim clears the records, and a bridge briefly shown as stood aside (and
// excused) before it would read as settled to a client waiting for it.
func (ow *Owners) loadStoodAside() error {
	if ow.cfg.TakeOver {
		return nil
	}
	aside, err := ow.cfg.Store.Identity().StoodAsideBridges()
	if err != nil {
		return err
	}
	for _, name := range ow.order {
		a, ok := aside[name]
		if !ok {
			continue
		}
		b := ow.bridges[name]
		b.owner.refused.Store(&a.Reason)
		ow.cfg.StandingAside.WithLabelValues(name).Set(1)
		ow.log.Error("standing aside: this flowstated will not change the bridge", "bridge", name, "reason", a.Reason, "since", a.Since)
		ow.cfg.Publish(events.Event{Type: events.BridgeStoodAside, Bridge: name, Message: a.Reason})
	}
	return nil
}

// undeclaredEntries counts what the switch holds besides the default flow
// (table 0, priority 0, empty match), within the owned cookie space: what a
// replay from this store would delete.
func (ow *Owners) undeclaredEntries(ctx context.Context, b *bridgeOwner, conn *ofconn.Conn) (int, error) {
	defer b.Take()()
	n := 0
	err := plan.EachFlowMod(ctx, conn, ow.cfg.OwnedCookie, func(m []byte, owned bool) {
		if id := entry.AppendFlowID(nil, m); owned && (len(id) != 3 || id[0] != 0 || id[1] != 0 || id[2] != 0) {
			n++
		}
	})
	if err != nil {
		return 0, err
	}
	if !ow.cfg.OwnedCookie.All() {
		return n, nil // undeclared groups and meters are left alone
	}
	others, err := plan.DumpGroupsMeters(ctx, conn)
	return n + len(others), err
}

// Instance describes a flowstated for the lock file and OVSDB.
type Instance struct {
	PID     int
	Host    string
	StoreID string
	Listen  string
	DB      string
}

func (i Instance) String() string {
	return fmt.Sprintf("pid=%d host=%s store=%s listen=%s db=%s", i.PID, i.Host, i.StoreID, i.Listen, i.DB)
}

// BridgeLocks are the lock files of the managed bridges, held while this
// flowstated runs.
type BridgeLocks struct {
	mu    sync.Mutex
	files []*os.File
}

// LockPath is the lock file of bridge: next to its management socket, where
// every flowstated that can reach the bridge also sees it.
func LockPath(runDir, bridge string) string {
	return filepath.Join(runDir, bridge+".flowstate.lock")
}

// LockBridges takes an exclusive flock on the lock file of every bridge, and
// writes who holds it there. A bridge locked by another live flowstated fails
// with ErrFailedPrecondition naming it: two flowstated on one bridge would
// each replay their own store and delete the other's flows. The kernel drops
// the lock when its holder dies, however it dies, so a dead flowstated never
// blocks its successor, and no clock or renewal is involved.
func LockBridges(runDir string, bridges []string, self Instance) (*BridgeLocks, error) {
	l := &BridgeLocks{}
	for _, br := range bridges {
		f, err := lockOne(LockPath(runDir, br), self)
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("restore: bridge %s: %w", br, err)
		}
		l.files = append(l.files, f)
	}
	return l, nil
}

func lockOne(path string, self Instance) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "unknown"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = strings.TrimSpace(string(b))
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("managed by another live flowstated (%s; lock %s): this one stands aside and "+
				"will not start (docs/operations.md, One flowstated per bridge): %w", holder, path, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if _, err := f.WriteAt([]byte(self.String()+"\n"), 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock file: %w", err)
	}
	return f, nil
}

// Close releases the locks. The files stay: removing one could let a third
// flowstated lock a new file while a second still holds the old one.
func (l *BridgeLocks) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, f := range l.files {
		errs = append(errs, f.Close())
	}
	l.files = nil
	return errors.Join(errs...)
}
