package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofproxy"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// What the relay's unrecorded sessions installed.
//
// The relay carries every controller of the proxy socket, those that do not
// speak OpenFlow 1.5 (an OpenFlow 1.3 os-ken app) too. flowstated leaves
// such a controller's entries alone (server/restore, kept.go), but it learns
// of them only through its own proxy; what one installed through the relay
// would be taken, at flowstated's return, for what the proxied module's
// controller installed (adopt.go), declared as that module's, and then
// restored over the unrecorded controller's later changes and deleted by
// the module's next resync. So the relay follows those sessions as
// flowstated's proxy does (ofproxy.Keeper) and writes what they installed
// beside the lease (RelayedKeptPath); flowstated's first reconcile after its
// return tells its own Keeper the same (RelayedKept.Replay) before it
// learns, so they stay left alone and are not the module's.
//
// The set follows one vswitchd, as flowstated's does: a session under
// another empties it. It accumulates across relaying periods (flowstated
// may not have read it in between) and holds at most maxRelayKept entries
// (past that, what the sessions install is not noted, and flowstated may
// learn it as the module's, as before). It is written at most every
// relayKeptFlush after a change, and once more when the relaying stops.

// maxRelayKept bounds the entries one relay's set holds.
const maxRelayKept = 1 << 16

// relayKeptFlush is how long a change of the set may wait to be written.
const relayKeptFlush = 20 * time.Millisecond

// RelayedKept is what the relay's unrecorded sessions installed on one
// bridge under one vswitchd.
type RelayedKept struct {
	Bridge   string `json:"bridge"`
	Vswitchd string `json:"vswitchd"`
	// Entries are the ofproxy.Keeper.Keep messages, Rules the KeepRule
	// ones (table<<16 | priority).
	Entries []KeptEntry `json:"entries,omitempty"`
	Rules   []uint32    `json:"rules,omitempty"`
}

// KeptEntry is one Keep: the kind and the message naming the entry.
type KeptEntry struct {
	Kind entry.Kind `json:"kind"`
	Msg  []byte     `json:"msg"`
}

// RelayedKeptPath is the file of bridge's RelayedKept beside the lease.
func RelayedKeptPath(lease, bridge string) string { return RelayedPath(lease, bridge) + ".kept" }

// Replay tells k what the set holds, after k.Begin.
func (s RelayedKept) Replay(k ofproxy.Keeper) {
	k.Begin()
	for _, e := range s.Entries {
		k.Keep(e.Kind, e.Msg)
	}
	for _, r := range s.Rules {
		k.KeepRule(uint8(r>>16), uint16(r))
	}
}

// ReadRelayedKept returns bridge's RelayedKept beside lease; ok is false
// when there is none.
func ReadRelayedKept(lease, bridge string) (s RelayedKept, ok bool, err error) {
	b, err := os.ReadFile(RelayedKeptPath(lease, bridge))
	if errors.Is(err, os.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("guard: relayed kept entries: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, false, fmt.Errorf("guard: relayed kept entries %s: %w", RelayedKeptPath(lease, bridge), err)
	}
	if s.Bridge != bridge {
		return s, false, fmt.Errorf("guard: relayed kept entries %s name bridge %q", RelayedKeptPath(lease, bridge), s.Bridge)
	}
	return s, true, nil
}

// relayKeeper is one relay's ofproxy.Keeper: the set of what its
// unrecorded sessions installed, written beside the lease.
type relayKeeper struct {
	path, bridge, rundir string
	log                  *slog.Logger

	mu    sync.Mutex
	set   RelayedKept
	ids   map[string]int // kind+msg → index in set.Entries
	rules map[uint32]bool
	full  bool // maxRelayKept reached: logged once
	dirty bool
	timer *time.Timer // a pending write; nil when none
}

func newRelayKeeper(lease string, rl Relay, log *slog.Logger) *relayKeeper {
	return &relayKeeper{path: RelayedKeptPath(lease, rl.Bridge), bridge: rl.Bridge, rundir: filepath.Dir(rl.Upstream), log: log}
}

// Begin empties a set filled under another vswitchd.
func (k *relayKeeper) Begin() {
	id := ovsconfig.VswitchdIdentity(k.rundir)
	k.mu.Lock()
	defer k.mu.Unlock()
	if id != k.set.Vswitchd {
		k.set = RelayedKept{Bridge: k.bridge, Vswitchd: id}
		k.ids, k.rules, k.full = nil, nil, false
		k.changedLocked()
	}
}

func (k *relayKeeper) Keep(kind entry.Kind, msg []byte) {
	key := keptKey(kind, msg)
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.ids[key]; ok || !k.roomLocked() {
		return
	}
	if k.ids == nil {
		k.ids = make(map[string]int)
	}
	k.ids[key] = len(k.set.Entries)
	k.set.Entries = append(k.set.Entries, KeptEntry{Kind: kind, Msg: append([]byte(nil), msg...)})
	k.changedLocked()
}

func (k *relayKeeper) KeepRule(table uint8, priority uint16) {
	r := uint32(table)<<16 | uint32(priority)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rules[r] || !k.roomLocked() {
		return
	}
	if k.rules == nil {
		k.rules = make(map[uint32]bool)
	}
	k.rules[r] = true
	k.set.Rules = append(k.set.Rules, r)
	k.changedLocked()
}

// Forget removes the entry msg names, when msg is the one its Keep named
// (the same match bytes); otherwise it stays, which leaves it alone: the
// safe side.
func (k *relayKeeper) Forget(kind entry.Kind, msg []byte) {
	key := keptKey(kind, msg)
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.ids[key]; ok {
		k.removeLocked(func(e KeptEntry) bool { return keptKey(e.Kind, e.Msg) == key })
	}
}

func (k *relayKeeper) ForgetAll(kind entry.Kind) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.removeLocked(func(e KeptEntry) bool { return e.Kind == kind })
	if kind == entry.KindFlow && len(k.set.Rules) > 0 {
		k.set.Rules, k.rules = nil, nil
		k.changedLocked()
	}
}

func (k *relayKeeper) removeLocked(gone func(KeptEntry) bool) {
	out := k.set.Entries[:0]
	for _, e := range k.set.Entries {
		if !gone(e) {
			out = append(out, e)
		}
	}
	if len(out) == len(k.set.Entries) {
		return
	}
	k.set.Entries = out
	k.ids = make(map[string]int, len(out))
	for i, e := range out {
		k.ids[keptKey(e.Kind, e.Msg)] = i
	}
	k.changedLocked()
}

func keptKey(kind entry.Kind, msg []byte) string { return string(append([]byte{byte(kind)}, msg...)) }

func (k *relayKeeper) roomLocked() bool {
	if len(k.set.Entries)+len(k.set.Rules) < maxRelayKept {
		return true
	}
	if !k.full {
		k.full = true
		k.log.Warn("guard: unrecorded controllers installed more entries through the relay than the guard notes: flowstated, once back, may take the rest for the proxied module's", "bridge", k.bridge, "max", maxRelayKept)
	}
	return false
}

// changedLocked schedules a write of the set.
func (k *relayKeeper) changedLocked() {
	k.dirty = true
	if k.timer == nil {
		k.timer = time.AfterFunc(relayKeptFlush, k.flush)
	}
}

// flush writes the set if it changed since its last write.
func (k *relayKeeper) flush() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	if !k.dirty {
		return
	}
	k.dirty = false
	sort.Slice(k.set.Rules, func(i, j int) bool { return k.set.Rules[i] < k.set.Rules[j] })
	b, err := json.Marshal(k.set)
	if err == nil {
		tmp := k.path + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, k.path)
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
	}
	if err != nil {
		k.log.Error("guard: cannot record what an unrecorded controller installed through the relay: flowstated, once back, may take it for the proxied module's", "bridge", k.bridge, "err", err)
	}
}
