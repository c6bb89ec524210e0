package guard

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
)

// recKeeper records the calls a RelayedKept replays.
type recKeeper struct{ calls []string }

func (k *recKeeper) Begin() { k.calls = append(k.calls, "begin") }
func (k *recKeeper) Keep(kind entry.Kind, msg []byte) {
	k.calls = append(k.calls, fmt.Sprintf("keep %d %s", kind, msg))
}
func (k *recKeeper) KeepRule(table uint8, priority uint16) {
	k.calls = append(k.calls, fmt.Sprintf("rule %d %d", table, priority))
}
func (k *recKeeper) Forget(entry.Kind, []byte) { k.calls = append(k.calls, "forget") }
func (k *recKeeper) ForgetAll(entry.Kind)      { k.calls = append(k.calls, "forget-all") }

// TestRelayKeeper: what the relay's unrecorded sessions install is written
// beside the lease after a change and read back as the same Keeper calls;
// strict deletes and deletes of everything take entries out, and a session
// under another vswitchd empties the set.
func TestRelayKeeper(t *testing.T) {
	dir := t.TempDir()
	lease := filepath.Join(dir, "lease")
	pidfile := filepath.Join(dir, "ovs-vswitchd.pid")
	if err := os.WriteFile(pidfile, []byte("100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := newRelayKeeper(lease, Relay{Bridge: "br-int", Upstream: filepath.Join(dir, "br-int.mgmt")}, slog.New(slog.DiscardHandler))
	read := func() (RelayedKept, []string) {
		t.Helper()
		k.flush()
		s, ok, err := ReadRelayedKept(lease, "br-int")
		if err != nil || !ok {
			t.Fatalf("ReadRelayedKept: ok=%v err=%v", ok, err)
		}
		var r recKeeper
		s.Replay(&r)
		return s, r.calls
	}
	k.Begin()
	k.Keep(entry.KindFlow, []byte("f1"))
	k.Keep(entry.KindFlow, []byte("f2"))
	k.Keep(entry.KindFlow, []byte("f1"))
	k.Keep(entry.KindGroup, []byte("g1"))
	k.KeepRule(40, 10)
	k.Forget(entry.KindFlow, []byte("f2"))
	s, calls := read()
	if want := []string{"begin", "keep 1 f1", "keep 2 g1", "rule 40 10"}; !slices.Equal(calls, want) || s.Vswitchd == "" {
		t.Fatalf("replayed %q under %q, want %q", calls, s.Vswitchd, want)
	}
	k.ForgetAll(entry.KindFlow)
	if _, calls = read(); !slices.Equal(calls, []string{"begin", "keep 2 g1"}) {
		t.Fatalf("after a delete of every flow: %q", calls)
	}
	// Another vswitchd: a new pidfile time.
	if err := os.WriteFile(pidfile, []byte("200\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(pidfile, later, later); err != nil {
		t.Fatal(err)
	}
	k.Begin()
	k.Keep(entry.KindMeter, []byte("m1"))
	s2, calls := read()
	if !slices.Equal(calls, []string{"begin", "keep 3 m1"}) || s2.Vswitchd == s.Vswitchd {
		t.Fatalf("under another vswitchd: %q (vswitchd %q, before %q)", calls, s2.Vswitchd, s.Vswitchd)
	}
}
