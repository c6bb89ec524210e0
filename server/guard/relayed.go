package guard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// Relayed is the guard's evidence that it relayed a controller straight to
// a bridge's vswitchd while flowstated was away: the switch may hold what
// the controller installed unrecorded, which flowstated's first reconcile of
// the bridge learns instead of overwriting (owner.Owners.AdoptRelayed).
// The guard writes it beside the lease (RelayedPath) when it accepts a
// relayed session, before the session relays anything; flowstated removes
// it once it took it into account (ClearRelayed).
type Relayed struct {
	Bridge string `json:"bridge"`
	// Module is the module the guard relayed for ("" from a guard that
	// does not know it).
	Module string `json:"module,omitempty"`
	// Vswitchd is the vswitchd the session was relayed to
	// (ovsconfig.VswitchdIdentity), "" unknown: relayed flows lived only
	// as long as it did.
	Vswitchd string `json:"vswitchd"`
	// Live is the vswitchd that ran when the guard last saw flowstated
	// renew its lease before it relayed ("" unknown): flowstated's
	// entries were on it, so what it lacks now the controller deleted.
	Live  string    `json:"live,omitempty"`
	At    time.Time `json:"at"`
	Guard int       `json:"guard_pid"`
}

// RelayedPath is the marker of bridge's relayed sessions beside the lease.
func RelayedPath(lease, bridge string) string { return lease + ".relayed." + bridge }

// markRelayed writes the marker of rl's bridge for the session just
// accepted. It must not block (ofproxy.Config.Connected): a small file,
// renamed into place, not synced (a host crash restarts vswitchd, and the
// relayed flows go with it). A marker that cannot be written costs only the
// learning: flowstated then replays its store over the relayed flows.
func (r *relayer) markRelayed(rl Relay, live string) {
	m := Relayed{Bridge: rl.Bridge, Module: rl.Module, Vswitchd: ovsconfig.VswitchdIdentity(filepath.Dir(rl.Upstream)), Live: live, At: time.Now().UTC(), Guard: os.Getpid()}
	if err := writeRelayed(RelayedPath(r.lease, rl.Bridge), m); err != nil {
		r.log.Error("guard: cannot record the relayed session: flowstated, once back, replays its store over what the controller installs meanwhile", "bridge", rl.Bridge, "err", err)
	}
}

func writeRelayed(path string, m Relayed) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("guard: relayed marker: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("guard: relayed marker: %w", err)
	}
	return nil
}

// ReadRelayed returns the marker of bridge's relayed sessions beside lease;
// ok is false when there is none.
func ReadRelayed(lease, bridge string) (m Relayed, ok bool, err error) {
	b, err := os.ReadFile(RelayedPath(lease, bridge))
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, fmt.Errorf("guard: relayed marker: %w", err)
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &m); err != nil {
		return m, false, fmt.Errorf("guard: relayed marker %s: %w", RelayedPath(lease, bridge), err)
	}
	if m.Bridge != bridge {
		return m, false, fmt.Errorf("guard: relayed marker %s names bridge %q", RelayedPath(lease, bridge), m.Bridge)
	}
	return m, true, nil
}

// ClearRelayed removes the marker of m's bridge if it still says m (or
// cannot be read): one the guard wrote since, for a later session, stays.
func ClearRelayed(lease string, m Relayed) error {
	now, ok, err := ReadRelayed(lease, m.Bridge)
	if err == nil && (!ok || now.Vswitchd != m.Vswitchd || !now.At.Equal(m.At) || now.Guard != m.Guard) {
		return nil
	}
	if err := os.Remove(RelayedPath(lease, m.Bridge)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("guard: relayed marker: %w", err)
	}
	return nil
}
