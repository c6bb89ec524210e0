package owner

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofproxy"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// Entries left alone.
//
// A controller behind the OpenFlow proxy that does not speak OpenFlow 1.5
// (an OpenFlow 1.3 os-ken app, an OpenFlow 1.0 one) is relayed but not
// recorded (server/ofproxy, unrecorded.go): its flows, groups and meters go
// to the switch as it sends them, and no module declares them. On a managed
// bridge every undeclared entry in the owned cookie space is the engine's to
// delete, so the proxy tells the engine what such a session installs, and
// the engine keeps, per bridge, the set of those identities: flows by
// (table, priority, canonical match), groups and meters by id, and for the
// flows whose match the proxy cannot read (OpenFlow 1.0 and 1.1,
// NXT_FLOW_MOD) a rule by (table, priority) that covers every flow there but
// the match-all one (so a rule never covers vswitchd's default NORMAL
// flow).
//
// A dump of the replay (replay.Rooms.Kept) leaves the switch's entries in the set out of every
// comparison, as it leaves out flows outside the owned cookie space: an
// audit, a replay, Reconcile and Diff neither delete nor count them, and
// status names how many there are (BridgeStatus.LeftAlone). They are never
// added either: the engine only refrains from deleting them, so a delete
// of the controller's (strict or not) stands. A declared entry of the same
// identity wins: the module's version is restored, and the disagreement is
// logged once.
//
// The set lasts for one vswitchd (Vswitchd.Identity): the controller
// reinstalls after a restart, and the proxy closes its sessions when
// vswitchd goes. It outlives flowstated: it is kept in the store and
// loaded before the first replay (keptsave.go). A session that starts under another vswitchd than the one
// the set was filled under empties it, as does a dump under another
// vswitchd. It holds at most maxKept identities and rules; past that the
// engine leaves every undeclared entry of the bridge alone until vswitchd
// restarts, and says so in status. A strict delete of the session's removes
// the identity, and a delete of every flow (group, meter) removes them all.

// maxKept bounds the identities and rules kept per bridge: some 30 MB at
// the longest matches.
const maxKept = 1 << 18

// keptSet is one bridge's entries left alone. Its own lock: the proxy's
// pumps add to it while a replay reads it.
type keptSet struct {
	mu sync.Mutex
	// vswitchd is the vswitchd the set was filled under ("" unknown).
	vswitchd string
	// ids holds key(kind, id) of each entry; the value is true once a
	// declaration of the same identity was logged.
	ids map[string]bool
	// rules holds table<<16|priority of the flows kept by rule.
	rules map[uint32]bool
	// all: the set overflowed; every undeclared entry is left alone.
	all bool
	// found is the number of switch entries the last dump left alone.
	found atomic.Int64
	// logged: an undecodable match was logged.
	logged bool
	// save is what the store does not hold yet (keptsave.go).
	save keptSave
}

// keeper is the engine's side of the unrecorded sessions of one bridge's
// proxy.
type keeper struct {
	ow  *Owners
	b   *bridgeOwner
	log *slog.Logger
}

// Kept returns what bridge's proxy tells of its unrecorded sessions.
func (ow *Owners) Kept(bridge string) (ofproxy.Keeper, error) {
	b, err := ow.bridge(bridge)
	if err != nil {
		return nil, err
	}
	return &keeper{ow: ow, b: b, log: ow.log.With("bridge", bridge)}, nil
}

// Begin starts an unrecorded session: a set filled under another vswitchd
// is emptied.
func (k *keeper) Begin() {
	id := k.ow.cfg.Vswitchd.Identity()
	s := &k.b.kept
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sameVswitchdLocked(id, true)
}

// sameVswitchdLocked empties the set when id names another vswitchd than
// the one it was filled under; adopt makes id the set's vswitchd.
func (s *keptSet) sameVswitchdLocked(id string, adopt bool) {
	if id != "" && s.vswitchd != "" && id != s.vswitchd {
		s.ids, s.rules, s.all, s.logged = nil, nil, false, false
		s.found.Store(0)
		s.vswitchd = ""
		s.resaveLocked()
	}
	if adopt && id != "" && s.vswitchd != id {
		s.vswitchd = id
		s.changedLocked()
	}
}

// identity is the key of the entry msg names (an OpenFlow 1.5 FLOW_MOD ADD
// with its table, priority and match, or a GROUP_MOD or METER_MOD with its
// id), or "" when it cannot be read.
func identity(kind entry.Kind, msg []byte) string {
	switch kind {
	case entry.KindFlow:
		_, id, err := canon.DecodeDelete(entry.KindFlow, msg)
		if err != nil {
			return ""
		}
		return plan.Key(kind, id)
	case entry.KindGroup, entry.KindMeter:
		if id := entry.ModID(msg); id != nil {
			return plan.Key(kind, id)
		}
	}
	return ""
}

// Keep notes that an unrecorded session installs the entry msg names (see
// identity). A flow whose match canon cannot read is kept by rule.
func (k *keeper) Keep(kind entry.Kind, msg []byte) {
	id := identity(kind, msg)
	s := &k.b.kept
	s.mu.Lock()
	if id == "" {
		if kind != entry.KindFlow || len(msg) < 32 {
			s.mu.Unlock()
			return
		}
		if !s.logged {
			s.logged = true
			k.log.Warn("proxy: a flow of an unrecorded controller has a match flowstated cannot read: every undeclared flow of its table and priority is left alone",
				"table", entry.FlowModTable(msg), "priority", entry.FlowModPriority(msg))
		}
		s.addRuleLocked(k.log, entry.FlowModTable(msg), entry.FlowModPriority(msg))
		s.unlockSaved(k)
		return
	}
	if _, ok := s.ids[id]; ok || !s.roomLocked(k.log) {
		s.unlockSaved(k)
		return
	}
	if s.ids == nil {
		s.ids = make(map[string]bool)
	}
	s.ids[id] = false
	s.dirtyLocked(id)
	s.unlockSaved(k)
}

// KeepRule notes that an unrecorded session installs a flow of table and
// priority whose match the proxy cannot read.
func (k *keeper) KeepRule(table uint8, priority uint16) {
	s := &k.b.kept
	s.mu.Lock()
	s.addRuleLocked(k.log, table, priority)
	s.unlockSaved(k)
}

func (s *keptSet) addRuleLocked(log *slog.Logger, table uint8, priority uint16) {
	r := uint32(table)<<16 | uint32(priority)
	if _, ok := s.rules[r]; ok || !s.roomLocked(log) {
		return
	}
	if s.rules == nil {
		s.rules = make(map[uint32]bool)
	}
	s.rules[r] = true
	s.dirtyRuleLocked(r)
}

// roomLocked reports whether one more identity fits; when none does, the
// set turns into "every undeclared entry".
func (s *keptSet) roomLocked(log *slog.Logger) bool {
	if s.all {
		return false
	}
	if len(s.ids)+len(s.rules) < maxKept {
		return true
	}
	s.all, s.ids, s.rules = true, nil, nil
	s.resaveLocked()
	log.Warn("proxy: unrecorded controllers installed more entries than flowstated tracks: every undeclared entry of the bridge is left alone until vswitchd restarts", "max", maxKept)
	return false
}

// Forget notes that an unrecorded session deletes, strictly, the entry msg
// names (see identity).
func (k *keeper) Forget(kind entry.Kind, msg []byte) {
	id := identity(kind, msg)
	if id == "" {
		return
	}
	s := &k.b.kept
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		delete(s.ids, id)
		s.dirtyLocked(id)
	}
}

// ForgetAll notes that an unrecorded session deletes every entry of kind
// (a flow delete of every table with no match, OFPG_ALL, OFPM_ALL): the
// switch holds none of them any more, whoever installed them.
func (k *keeper) ForgetAll(kind entry.Kind) {
	s := &k.b.kept
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.ids {
		if entry.Kind(id[0]) == kind {
			delete(s.ids, id)
			s.dirtyLocked(id)
		}
	}
	if kind == entry.KindFlow {
		for r := range s.rules {
			s.dirtyRuleLocked(r)
		}
		s.rules = nil
	}
}

// KeptFilter decides, during one dump of a bridge, which of the switch's
// entries are left alone. Declared entries are never left alone.
type KeptFilter struct {
	s        *keptSet
	declared func(kind entry.Kind, id []byte) bool
	log      *slog.Logger
	found    int
	k        []byte
}

// keptFilter returns the filter of one dump of b, nil when the set is
// empty.
func (ow *Owners) keptFilter(b *bridgeOwner) *KeptFilter {
	s := &b.kept
	s.mu.Lock()
	s.sameVswitchdLocked(ow.cfg.Vswitchd.Identity(), false)
	empty := len(s.ids) == 0 && len(s.rules) == 0 && !s.all
	s.mu.Unlock()
	if empty {
		s.found.Store(0)
		return nil
	}
	log := ow.log.With("bridge", b.Name())
	return &KeptFilter{s: s, log: log, declared: func(kind entry.Kind, id []byte) bool {
		_, ok, err := ow.cfg.Store.Entries().Get(b.Name(), kind, id)
		if err != nil {
			// Cannot tell: leaving it alone is the safe side.
			log.Warn("reading the store for an entry of an unrecorded controller", "err", err)
			return false
		}
		return ok
	}}
}

// Leaves reports whether the dump leaves alone the entry of kind and
// identity id (a flow's identity as entry.AppendFlowID gives it).
func (f *KeptFilter) Leaves(kind entry.Kind, id []byte) bool {
	if f == nil {
		return false
	}
	f.k = append(append(f.k[:0], byte(kind)), id...)
	f.s.mu.Lock()
	conflictLogged, byID := f.s.ids[string(f.k)]
	// Not even overflowed does the set cover vswitchd's default flow.
	all := f.s.all && !(kind == entry.KindFlow && len(id) == 3 && id[0] == 0 && id[1] == 0 && id[2] == 0)
	byRule := false
	if kind == entry.KindFlow && len(id) > 3 && len(f.s.rules) > 0 {
		prio := uint32(entry.FlowPriority(id))
		byRule = f.s.rules[uint32(id[0])<<16|prio] || f.s.rules[0xff<<16|prio]
	}
	f.s.mu.Unlock()
	if !byID && !byRule && !all {
		return false
	}
	if f.declared(kind, id) {
		if byID && !conflictLogged {
			f.s.mu.Lock()
			if _, ok := f.s.ids[string(f.k)]; ok {
				f.s.ids[string(f.k)] = true
			}
			f.s.mu.Unlock()
			f.log.Warn("a module declares an entry an unrecorded controller behind the proxy installed: the module's version is restored", "kind", kind.String())
		}
		return false
	}
	f.found++
	return true
}

// Done publishes what the dump left alone.
func (f *KeptFilter) Done() {
	if f != nil {
		f.s.found.Store(int64(f.found))
	}
}

// status is the state of b's kept set: the switch entries its last dump
// left alone, and whether every undeclared entry is.
func (s *keptSet) status() (found int, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.found.Load()), s.all
}
