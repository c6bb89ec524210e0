package owner

import (
	"context"
	"encoding/binary"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/poison"
	"github.com/flowstate-io/flowstate/store"
)

// TestKeptSaved: what an unrecorded session keeps is in the store when
// Keep returns (before the message goes to the switch); a new engine on
// the same vswitchd loads it; a new engine after a vswitchd restart drops
// it, from memory and from the store; and a store that refuses writes
// neither blocks Keep nor loses the set in memory.
func TestKeptSaved(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatalf("start OVS sandbox (%s): %v", sandbox.InstallHint, err)
	}
	defer sb.Close()
	if err := sb.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sb.Dir(), "fs.db")
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	newEngine := func(st *store.Store) *Owners {
		t.Helper()
		e, err := New(Config{Store: st, Bridges: []*bridge.State{bridge.New("br0", nil, poison.Config{})},
			Vswitchd: runDir(sb.RunDir()), Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// run starts e's saver of br0; the returned func stops it.
	run := func(e *Owners) func() {
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { e.runKept(rctx, e.bridges["br0"]) })
		return func() { stop(); wg.Wait() }
	}
	groupMod := func(id uint32) []byte {
		m := make([]byte, 16)
		m[0], m[1] = 6, 15
		binary.BigEndian.PutUint32(m[12:], id)
		return m
	}
	stored := func(st *store.Store) store.KeptRecord {
		t.Helper()
		r, err := st.Kept().Get("br0")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	e := newEngine(st)
	stop := run(e)
	k, err := e.Kept("br0")
	if err != nil {
		t.Fatal(err)
	}
	k.Begin()
	k.Keep(entry.KindGroup, groupMod(7))
	k.KeepRule(0, 100)
	r := stored(st)
	if r.Vswitchd != e.cfg.Vswitchd.Identity() || r.Vswitchd == "" || len(r.IDs) != 1 || len(r.Rules) != 1 || r.Rules[0] != 100 {
		t.Fatalf("stored when Keep returned: %+v, want the group and the rule under vswitchd %q", r, e.cfg.Vswitchd.Identity())
	}
	k.Keep(entry.KindGroup, groupMod(8))
	k.Forget(entry.KindGroup, groupMod(7))
	stop()
	if r := stored(st); len(r.IDs) != 1 || string(r.IDs[0]) != string(plan.Key(entry.KindGroup, groupMod(8)[12:16])) {
		t.Fatalf("stored after a forget and the saver's stop: %+v, want group 8 alone", r)
	}

	// A restarted flowstated, same vswitchd: loaded before any replay.
	e = newEngine(st)
	s := &e.bridges["br0"].kept
	if _, ok := s.ids[plan.Key(entry.KindGroup, groupMod(8)[12:16])]; !ok || !s.rules[100] || s.vswitchd != r.Vswitchd {
		t.Fatalf("loaded: ids %v rules %v vswitchd %q, want group 8, rule 100 under %q", s.ids, s.rules, s.vswitchd, r.Vswitchd)
	}

	// Another vswitchd: dropped, in the store too once the saver runs.
	if err := sb.RestartVswitchd(ctx, false); err != nil {
		t.Fatal(err)
	}
	e = newEngine(st)
	if s := &e.bridges["br0"].kept; len(s.ids) != 0 || len(s.rules) != 0 || s.all {
		t.Fatalf("after a vswitchd restart: ids %v rules %v all %v, want nothing kept", s.ids, s.rules, s.all)
	}
	stop = run(e)
	deadline := time.Now().Add(10 * time.Second)
	for !stored(st).Empty() {
		if time.Now().After(deadline) {
			t.Fatalf("the record of the previous vswitchd is still stored: %+v", stored(st))
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	// A store that refuses writes: Keep returns at once, and keeps.
	st2, err := store.Open(filepath.Join(t.TempDir(), "fs.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e = newEngine(st2)
	stop = run(e)
	defer stop()
	_ = st2.Close()
	k, err = e.Kept("br0")
	if err != nil {
		t.Fatal(err)
	}
	k.Begin()
	start := time.Now()
	for id := range uint32(20) {
		k.Keep(entry.KindGroup, groupMod(id))
	}
	if d := time.Since(start); d >= keptSaveWait {
		t.Fatalf("20 Keeps on a store that refuses writes took %v, want under %v", d, keptSaveWait)
	}
	s = &e.bridges["br0"].kept
	s.mu.Lock()
	n, failing := len(s.ids), s.save.failing
	s.mu.Unlock()
	if n != 20 || !failing {
		t.Fatalf("with the store refusing: %d identities kept in memory, failing %v; want 20, true", n, failing)
	}
}

// runDir names the vswitchd whose pidfile is in a run directory, and its
// bridges.
type runDir string

func (d runDir) Identity() string { return ovsconfig.VswitchdIdentity(string(d)) }

func (d runDir) BridgeIdentity(bridge string) string {
	return ovsconfig.BridgeIdentity(string(d), bridge)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
