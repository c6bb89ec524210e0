package owner

import (
	"context"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/store"
)

// Saving the entries left alone.
//
// A kept set (kept.go) that lived in memory only was lost with flowstated:
// the replay at the next start deleted the controller's entries as
// undeclared, and a controller that does not reinstall on reconnect lost
// them for good. The set is kept in the store (store.Kept, one small
// bucket per bridge, naming the vswitchd it belongs to) and loaded by New,
// before the first replay.
//
// Writes are off the relay's path: each change marks what it touched, and
// one goroutine per bridge (runKept) stores the changes of a bridge in one
// transaction. A Keep that adds something waits for that transaction, at
// most keptSaveWait, so that an entry reaches the switch after the store
// holds it and a flowstated killed at any point finds it at its restart. A
// store that fails or stalls never stops the relay: the failure is logged,
// Keep stops waiting until a write succeeds again, and the saver retries
// with a backoff; meanwhile the set in memory stays whole. A failed write
// is followed by one that only marks the record "every undeclared entry"
// (a full disk may take a write that needs no new page), so a flowstated
// restart before the retry succeeds keeps rather than deletes; only when
// that fails too does it lose what was not stored.
//
// At the start a record fails safe: one of another vswitchd (both known,
// different) is dropped, so vswitchd's default NORMAL flow and a
// stranger's flows are handled as ever after a vswitchd restart; one of an
// unknown vswitchd, or read while the vswitchd is unknown, is kept; one the
// store cannot read (a damaged value) leaves every undeclared entry of the
// bridge alone until vswitchd restarts, as an overflowed set does.

// keptSaveWait bounds a Keep's wait for the store.
const keptSaveWait = time.Second

// keptRetryMax bounds the backoff of a failing saver.
const keptRetryMax = 30 * time.Second

// keptSave is what the store does not hold yet of a keptSet; guarded by
// the set's mu.
type keptSave struct {
	// dirty and dirtyRules are the identities and rules changed since
	// the last write; resave: the set changed whole (emptied, overflowed,
	// loaded from a record it replaces), it is written whole.
	dirty      map[string]struct{}
	dirtyRules map[uint32]struct{}
	resave     bool
	// gen counts changes, savedGen is the gen the store holds.
	gen, savedGen uint64
	// done is closed, and replaced, when a write ends.
	done chan struct{}
	// poke wakes the saver; running: it runs or is about to (from New
	// to the end of runKept), Keep may wait for it.
	poke    chan struct{}
	running bool
	// failing: the last write failed or outlasted keptSaveWait; Keep
	// does not wait until one succeeds.
	failing bool
}

func (s *keptSet) changedLocked() {
	s.save.gen++
	if s.save.poke != nil {
		select {
		case s.save.poke <- struct{}{}:
		default:
		}
	}
}

func (s *keptSet) dirtyLocked(id string) {
	if !s.save.resave {
		if s.save.dirty == nil {
			s.save.dirty = make(map[string]struct{})
		}
		s.save.dirty[id] = struct{}{}
	}
	s.changedLocked()
}

func (s *keptSet) dirtyRuleLocked(r uint32) {
	if !s.save.resave {
		if s.save.dirtyRules == nil {
			s.save.dirtyRules = make(map[uint32]struct{})
		}
		s.save.dirtyRules[r] = struct{}{}
	}
	s.changedLocked()
}

func (s *keptSet) resaveLocked() {
	s.save.resave, s.save.dirty, s.save.dirtyRules = true, nil, nil
	s.changedLocked()
}

// unlockSaved unlocks s.mu once the store holds what s holds now, or
// keptSaveWait passed, or the store is failing: the caller's message may
// then go to the switch.
func (s *keptSet) unlockSaved(k *keeper) {
	sv := &s.save
	if !sv.running || sv.failing || sv.savedGen >= sv.gen {
		s.mu.Unlock()
		return
	}
	g, done := sv.gen, sv.done
	s.mu.Unlock()
	timer := time.NewTimer(keptSaveWait)
	defer timer.Stop()
	for {
		select {
		case <-done:
		case <-timer.C:
			s.mu.Lock()
			if sv.savedGen < g && !sv.failing {
				sv.failing = true
				k.log.Warn("proxy: storing what an unrecorded controller installed takes longer than it may: relaying on; a flowstated restart before the store catches up deletes what it does not hold",
					"waited", keptSaveWait)
			}
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		ok := sv.savedGen >= g || sv.failing || !sv.running
		done = sv.done
		s.mu.Unlock()
		if ok {
			return
		}
	}
}

// loadKept fills b's set from the store (see the comment above); New calls
// it before any replay.
func (ow *Owners) loadKept(b *bridgeOwner) {
	s := &b.kept
	log := ow.log.With("bridge", b.Name())
	id := ow.cfg.Vswitchd.Identity()
	rec, err := ow.cfg.Store.Kept().Get(b.Name())
	s.mu.Lock()
	defer s.mu.Unlock()
	// Run starts the saver; a Keep before it waits for it too.
	s.save.poke, s.save.done, s.save.running = make(chan struct{}, 1), make(chan struct{}), true
	switch {
	case err != nil:
		s.all, s.vswitchd = true, id
		s.resaveLocked()
		log.Error("restore: the entries unrecorded controllers installed cannot be read from the store: every undeclared entry of the bridge is left alone until vswitchd restarts",
			"err", err)
	case rec.Empty():
	case rec.Vswitchd != "" && id != "" && rec.Vswitchd != id:
		s.resaveLocked()
		log.Info("restore: forgot the entries unrecorded controllers installed under the previous ovs-vswitchd",
			"recorded", rec.Vswitchd, "running", id)
	default:
		s.vswitchd, s.all = rec.Vswitchd, rec.All
		if len(rec.IDs) > 0 {
			s.ids = make(map[string]bool, len(rec.IDs))
			for _, k := range rec.IDs {
				s.ids[string(k)] = false
			}
		}
		if len(rec.Rules) > 0 {
			s.rules = make(map[uint32]bool, len(rec.Rules))
			for _, r := range rec.Rules {
				s.rules[r] = true
			}
		}
		log.Info("restore: entries unrecorded controllers installed are left alone, as before the restart",
			"identities", len(rec.IDs), "rules", len(rec.Rules), "all", rec.All, "vswitchd", rec.Vswitchd)
	}
}

// runKept stores b's set as it changes, until ctx ends; then it stores
// what is left once.
func (ow *Owners) runKept(ctx context.Context, b *bridgeOwner) {
	s := &b.kept
	log := ow.log.With("bridge", b.Name())
	s.mu.Lock()
	poke := s.save.poke
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.save.running = false
		close(s.save.done)
		s.save.done = make(chan struct{})
		s.mu.Unlock()
	}()
	var retry time.Duration
	var again <-chan time.Time
	for {
		if err := ow.saveKept(b, log); err != nil {
			retry = min(max(2*retry, 500*time.Millisecond), keptRetryMax)
			again = time.After(retry)
		} else {
			retry, again = 0, nil
		}
		select {
		case <-ctx.Done():
			_ = ow.saveKept(b, log)
			return
		case <-poke:
		case <-again:
		}
	}
}

// saveKept writes what changed in b's set since the last write.
func (ow *Owners) saveKept(b *bridgeOwner, log *slog.Logger) error {
	s := &b.kept
	sv := &s.save
	s.mu.Lock()
	if sv.gen == sv.savedGen {
		s.mu.Unlock()
		return nil
	}
	g := sv.gen
	u := store.KeptUpdate{Replace: sv.resave, Vswitchd: s.vswitchd, All: s.all}
	if sv.resave {
		for id := range s.ids {
			u.Put = append(u.Put, []byte(id))
		}
		for r := range s.rules {
			u.PutRules = append(u.PutRules, r)
		}
	} else {
		for id := range sv.dirty {
			if _, ok := s.ids[id]; ok {
				u.Put = append(u.Put, []byte(id))
			} else {
				u.Delete = append(u.Delete, []byte(id))
			}
		}
		for r := range sv.dirtyRules {
			if s.rules[r] {
				u.PutRules = append(u.PutRules, r)
			} else {
				u.DeleteRules = append(u.DeleteRules, r)
			}
		}
	}
	dirty, dirtyRules, resave := sv.dirty, sv.dirtyRules, sv.resave
	sv.dirty, sv.dirtyRules, sv.resave = nil, nil, false
	s.mu.Unlock()

	err := ow.cfg.Store.Kept().Update(b.Name(), u)
	marked := false
	if err != nil && !u.All {
		// A full disk may still take a write that grows nothing: the
		// record then says "every undeclared entry", the safe side for
		// a restart before the retry succeeds (which writes it exact).
		marked = ow.cfg.Store.Kept().Update(b.Name(), store.KeptUpdate{Vswitchd: u.Vswitchd, All: true}) == nil
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		close(sv.done)
		sv.done = make(chan struct{})
	}()
	if err == nil {
		sv.savedGen = g
		if sv.failing {
			sv.failing = false
			log.Info("restore: the entries unrecorded controllers installed are stored again")
		}
		return nil
	}
	// What was taken is written again with what changed since.
	switch {
	case resave || sv.resave:
		sv.resave, sv.dirty, sv.dirtyRules = true, nil, nil
	default:
		for id := range dirty {
			if sv.dirty == nil {
				sv.dirty = make(map[string]struct{})
			}
			sv.dirty[id] = struct{}{}
		}
		for r := range dirtyRules {
			if sv.dirtyRules == nil {
				sv.dirtyRules = make(map[uint32]struct{})
			}
			sv.dirtyRules[r] = struct{}{}
		}
	}
	sv.failing = true
	if marked {
		log.Error("restore: storing the entries unrecorded controllers installed failed: they are still left alone, the proxy relays on, and the write is retried; the store says to leave every undeclared entry of the bridge alone after a flowstated restart until it succeeds",
			"err", err)
	} else {
		log.Error("restore: storing the entries unrecorded controllers installed failed: they are still left alone, the proxy relays on, and the write is retried; a flowstated restart before it succeeds deletes what the store does not hold",
			"err", err)
	}
	return err
}
