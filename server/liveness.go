package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"

	"github.com/flowstate-io/flowstate/server/guard"
	"github.com/flowstate-io/flowstate/server/restore"
)

// Guard modes (Config.Guard.Mode).
const (
	// GuardOff: no guard; the flag is armed regardless (tests, or an
	// operator who accepts a node held by a dead flowstated).
	GuardOff = "off"
	// GuardSpawn: flowstated starts a guard process when none runs.
	GuardSpawn = "spawn"
	// GuardExternal: a guard runs as its own unit or container; without
	// one, flowstated does not arm the flag.
	GuardExternal = "external"
)

// GuardConfig configures the guard side of flowstated (package guard).
type GuardConfig struct {
	// Mode is GuardOff (the zero value ""), GuardSpawn or GuardExternal.
	Mode string
	// Lease is the lease file. Required unless Mode is off.
	Lease string
	// Grace is how long the lease may go unrenewed before the guard
	// releases the node. Default guard.DefaultGrace.
	Grace time.Duration
	// Command starts a guard for GuardSpawn: the program and its leading
	// arguments, to which the guard flags are appended. Default: this
	// executable with "guard".
	Command []string
	// Log is the guard's log file for GuardSpawn. Default: Lease + ".guard.log".
	Log string
}

func (g *GuardConfig) validate() error {
	if g.Grace <= 0 {
		g.Grace = guard.DefaultGrace
	}
	switch g.Mode {
	case "", GuardOff:
		g.Mode = GuardOff
		return nil
	case GuardSpawn, GuardExternal:
	default:
		return fmt.Errorf("server: guard mode %q: want off, spawn or external", g.Mode)
	}
	if g.Lease == "" {
		return fmt.Errorf("server: guard mode %s needs a lease file", g.Mode)
	}
	if g.Log == "" {
		g.Log = g.Lease + ".guard.log"
	}
	return nil
}

// keeper is flowstated's liveness: it renews the guard's lease while the
// engine is healthy, keeps a guard running (GuardSpawn), and reports health
// (gRPC health, /healthz, Config.Liveness for the systemd watchdog).
type keeper struct {
	cfg    GuardConfig
	ovsdb  string
	engine *restore.Engine
	hs     *health.Server
	log    *slog.Logger
	notify func(healthy bool, status string)

	lease   *guard.Lease
	present atomic.Bool
	wedged  atomic.Pointer[string]
}

// guardPresent is restore.Config.GuardPresent.
func (k *keeper) guardPresent() bool { return k.cfg.Mode == GuardOff || k.present.Load() }

// renewInterval paces renewals: several per grace, at most one a second.
func (k *keeper) renewInterval() time.Duration {
	return min(max(k.cfg.Grace/5, 10*time.Millisecond), time.Second)
}

// run renews until ctx ends. The lease is left in place when it returns: a
// lease that stops changing is how the guard learns that flowstated is gone.
func (k *keeper) run(ctx context.Context) {
	t := time.NewTicker(k.renewInterval())
	defer t.Stop()
	var lastWedged, lastErr string
	for {
		wedged := k.engine.Wedged()
		if wedged != lastWedged {
			if wedged != "" {
				k.log.Error("engine wedged: health NOT_SERVING, guard lease no longer renewed", "reason", wedged)
				k.hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			} else {
				k.log.Info("engine responsive again")
				k.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			}
			lastWedged = wedged
		}
		k.wedged.Store(&wedged)
		if err := k.tend(wedged == ""); err != nil && err.Error() != lastErr {
			k.log.Error("guard", "err", err)
			lastErr = err.Error()
		} else if err == nil {
			lastErr = ""
		}
		if k.notify != nil {
			k.notify(wedged == "", k.statusLine(wedged))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tend renews the lease when healthy and makes sure a guard runs.
func (k *keeper) tend(healthy bool) error {
	if k.cfg.Mode == GuardOff {
		return nil
	}
	if healthy {
		if err := k.lease.Renew(); err != nil {
			return err
		}
	}
	present, err := guard.Present(k.cfg.Lease)
	if err != nil {
		return err
	}
	if present != k.present.Load() {
		k.present.Store(present)
		if present {
			k.log.Info("guard running", "lease", k.cfg.Lease, "grace", k.cfg.Grace)
		}
	}
	if present || k.cfg.Mode != GuardSpawn || !healthy {
		if !present && k.cfg.Mode == GuardExternal {
			return fmt.Errorf("no guard holds %s: start the flowstate guard (unit or container); until then flow-restore-wait stays disarmed", guard.LockPath(k.cfg.Lease))
		}
		return nil
	}
	return k.spawn()
}

// spawn starts a guard in its own session, so that it outlives flowstated
// however flowstated ends; it exits by itself once it is not needed.
func (k *keeper) spawn() error {
	argv := k.cfg.Command
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("spawning a guard: %w", err)
		}
		argv = []string{exe, "guard"}
	}
	logf, err := os.OpenFile(k.cfg.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("spawning a guard: %w", err)
	}
	defer logf.Close()
	args := append(argv[1:len(argv):len(argv)], "--lease", k.cfg.Lease, "--ovsdb", k.ovsdb,
		"--grace", k.cfg.Grace.String(), "--exit-when-idle")
	cmd := exec.Command(argv[0], args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("spawning a guard: %w", err)
	}
	k.log.Info("guard spawned", "pid", cmd.Process.Pid, "log", k.cfg.Log)
	// Reaps the guard if it exits while flowstated runs; ends with it.
	go func() { _ = cmd.Wait() }()
	return nil
}

// statusLine is the one-line state for systemd's STATUS=.
func (k *keeper) statusLine(wedged string) string {
	if wedged != "" {
		return "wedged: " + wedged
	}
	if g := k.engine.Gate(); !g.Open {
		left := time.Until(g.Deadline).Round(time.Second)
		return fmt.Sprintf("cold-start gate: waiting for %s (readiness timeout in %v)", strings.Join(g.WaitingFor, ", "), left)
	}
	var pending []string
	for _, b := range k.engine.Status() {
		if !b.Converged {
			pending = append(pending, b.Name)
		}
	}
	if len(pending) > 0 {
		return "restoring or waiting for " + strings.Join(pending, ", ")
	}
	return "all bridges converged"
}

// status is the guard's part of Status.
func (k *keeper) status() *flowstatev1.Guard {
	return &flowstatev1.Guard{Mode: k.cfg.Mode, Running: k.cfg.Mode != GuardOff && k.present.Load(),
		Grace: durationpb.New(k.cfg.Grace), Lease: k.cfg.Lease}
}

// wedgedReason is the engine's last Wedged answer.
func (k *keeper) wedgedReason() string {
	if p := k.wedged.Load(); p != nil {
		return *p
	}
	return ""
}

// healthz serves /healthz: 200 while the engine is responsive, 503 with the
// reason while it is wedged.
func (k *keeper) healthz(w http.ResponseWriter, _ *http.Request) {
	if w2 := k.wedgedReason(); w2 != "" {
		http.Error(w, "wedged: "+w2, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
