package main

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/server/guard"
)

// newGuardProbeCommand is the guard container's readiness probe: it reads
// the guard's heartbeat, as flowstated does, without flowstated, so the
// probe says whether this guard could release the node now.
func newGuardProbeCommand() *cobra.Command {
	var (
		lease string
		grace time.Duration
	)
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Exit 0 while the guard's heartbeat is fresh: it writes to its OVSDB and would release the node",
		Long: `Exit 0 while the guard of --lease made an OVSDB round trip within the time
flowstated allows (a few heartbeats, at most --grace), its OVSDB took the
round trip's write (a read-only copy refuses it) and its process runs;
exit 1 naming what is wrong otherwise. For a readiness probe of the guard
container; it needs no flowstated.`,
		Example:       `  flowstated guard probe --lease /run/flowstate/flowstated.lease --grace 10s`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return probeGuard(lease, grace, time.Now())
		},
	}
	f := cmd.Flags()
	f.StringVar(&lease, "lease", defaultLease, "lease file the guard watches")
	f.DurationVar(&grace, "grace", guard.DefaultGrace, "the guard's --grace")
	return cmd
}

func probeGuard(lease string, grace time.Duration, now time.Time) error {
	h, err := guard.ReadHeartbeat(guard.HeartbeatPath(lease))
	if err != nil {
		return fmt.Errorf("guard probe: no heartbeat: the guard has not reached its OVSDB yet, or is not running: %w", err)
	}
	if age, stale := now.Sub(h.RoundTrip), guard.StaleAfter(grace); age > stale {
		return fmt.Errorf("guard probe: the guard (pid %d) made no OVSDB round trip for %v (more than %v): it is frozen or cannot reach %s",
			h.PID, age.Round(time.Millisecond), stale, h.Addr)
	}
	if err := h.CheckWrite(); err != nil {
		return fmt.Errorf("guard probe: %w", err)
	}
	if err := syscall.Kill(h.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("guard probe: the heartbeat's guard (pid %d) is not running: %w", h.PID, err)
	}
	return nil
}
