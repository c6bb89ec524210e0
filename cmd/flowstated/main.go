// Command flowstated keeps the desired OpenFlow state of the host's Open
// vSwitch bridges and restores it, atomically, whenever ovs-vswitchd restarts.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/version"
	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/guard"
	"github.com/flowstate-io/flowstate/server/restore"
	"github.com/flowstate-io/flowstate/server/restore/mirror"
	"github.com/flowstate-io/flowstate/server/restore/poison"
)

func main() {
	// Signals first, so a SIGTERM during start-up still stops us gracefully.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := newCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "flowstated:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var (
		cfg        server.Config
		logFormat  string
		logLevel   string
		writers    []string
		owned      string
		cpuProf    string
		proxies    []string
		proxyTCP   []string
		proxyRelay bool
	)
	cmd := &cobra.Command{
		Use:     "flowstated",
		Short:   "Keep Open vSwitch flows across ovs-vswitchd restarts",
		Version: version.Get().String("flowstated"),
		Example: `  # Manage br-int, hold a cold start until the pipeline module is ready:
  flowstated --bridge br-int --require-module pipeline

  # Share br-int with another controller: manage the flows with cookies 0x1000000000000000/0xf000000000000000:
  flowstated --bridge br-int --owned-cookie 0x1000000000000000/0xf000000000000000

  # Print the version, commit and Go version:
  flowstated --version`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, level, err := newLogger(logFormat, logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = log
			stopLevels := levelSignals(log, level)
			defer stopLevels()
			if cpuProf != "" {
				stop, err := startCPUProfile(cpuProf)
				if err != nil {
					return err
				}
				defer stop()
			}
			if cfg.OwnedCookie, err = entry.ParseCookieSpace(owned); err != nil {
				return fmt.Errorf("--owned-cookie: %w", err)
			}
			for _, p := range proxies {
				spec, err := server.ParseProxySpec(p)
				if err != nil {
					return fmt.Errorf("--openflow-proxy: %w", err)
				}
				cfg.Proxies = append(cfg.Proxies, spec)
			}
			cfg.NoProxyRelay = !proxyRelay
			for _, p := range proxyTCP {
				if err := server.ParseProxyTCP(cfg.Proxies, p); err != nil {
					return fmt.Errorf("--openflow-proxy-tcp: %w", err)
				}
			}
			cfg.Writers = server.Writers{}
			for _, w := range writers {
				if err := cfg.Writers.ParseWriter(w); err != nil {
					return fmt.Errorf("--module-writer: %w", err)
				}
			}
			// libOpenflow logs through klog; keep one log stream.
			klog.SetSlogLogger(log.With("component", "libOpenflow"))
			cfg.Ready = func() { _, _ = daemon.SdNotify(false, daemon.SdNotifyReady) }
			cfg.Liveness = systemdLiveness()
			err = server.Run(cmd.Context(), cfg)
			_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.RunDir, "ovs-rundir", "/var/run/openvswitch", "directory of ovs-vswitchd's <bridge>.mgmt sockets")
	f.StringVar(&cfg.OVSDB, "ovsdb", "unix:/var/run/openvswitch/db.sock", "ovsdb-server address")
	f.StringVar(&cfg.OVNRunDir, "ovn-rundir", ovnRunDir(), `directory of ovn-controller's pidfile and control socket, asked for its version when status is ("": not asked); $OVN_RUNDIR, else`)
	f.StringArrayVar(&cfg.Bridges, "bridge", []string{"br-int"}, "bridge to manage (repeatable)")
	f.StringVar(&cfg.DBPath, "db", "/var/lib/flowstate/flowstate.db", "state file")
	f.StringVar(&cfg.Listen, "listen", "unix:///run/flowstate/flowstate.sock", "gRPC listen address")
	f.StringVar(&cfg.UnmanagedBridges, "unmanaged-bridges", string(mirror.Preserve), "bridges of vswitchd not given with --bridge: preserve (mirror their flows, groups and meters and restore them after a gated vswitchd restart, as ovs-save would) or ignore (they come back as vswitchd makes them)")
	f.DurationVar(&cfg.MirrorInterval, "mirror-interval", mirror.DefaultInterval, "how often the mirror of an unmanaged bridge checks for change (its flow monitor, its groups and meters) and, after one, dumps the bridge again")
	f.StringVar(&cfg.BootIDFile, "boot-id-file", "/proc/sys/kernel/random/boot_id", "file holding the host boot id")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9452", "HTTP address of /metrics and /healthz (empty disables)")
	f.DurationVar(&cfg.EchoInterval, "ofp-echo-interval", server.DefaultEchoInterval, "OpenFlow echo request interval on an idle bridge connection")
	f.DurationVar(&cfg.EchoTimeout, "ofp-echo-timeout", server.DefaultEchoTimeout, "declare a bridge connection dead after this long without an echo reply")
	f.BoolVar(&cfg.RearmFlowRestoreWait, "rearm-flow-restore-wait", true, "set flow-restore-wait back to true after each restore, so a crashed vswitchd also restarts gated (cleared again on a graceful stop)")
	f.StringArrayVar(&cfg.RequiredModules, "require-module", nil, "module that must be ready before a cold start replays (repeatable)")
	f.DurationVar(&cfg.ReadinessTimeout, "readiness-timeout", 5*time.Minute, "after a cold start, replay the last known state if required modules are not ready by then")
	f.DurationVar(&cfg.AuditInterval, "audit-interval", 30*time.Second, "compare every bridge with the desired state at this interval; drift (flows deleted or changed behind flowstate's back) marks the bridge unconverged and is corrected (0 disables)")
	f.DurationVar(&cfg.MaxHold, "max-hold", restore.DefaultMaxHold, "longest time one bridge that cannot be restored (managed, or an unmanaged bridge from its mirror) keeps flow-restore-wait set for the others")
	f.DurationVar(&cfg.SurviveAfter, "survive-after", poison.DefaultSurviveAfter, "a replay counts as survived once ovs-vswitchd stayed up this long after it; a death sooner counts towards the crash-loop protection")
	f.DurationVar(&cfg.CrashWindow, "crash-window", poison.DefaultCrashWindow, "two vswitchd deaths during or shortly after a replay within this window hold out the entries changed since the last survived replay, and bisect them across restarts")
	f.StringVar(&cfg.VswitchdLog, "vswitchd-log", "/var/log/openvswitch/ovs-vswitchd.log", "ovs-vswitchd's log file: what it logged during a replay tells a crash (an abort's EMER line) from a kill from outside (a --monitor parent's \"killed (Killed)\"), which does not count towards the crash-loop protection (\"\": not read)")
	f.BoolVar(&cfg.ProcExits, "proc-connector", true, "hear the exit status of ovs-vswitchd from the kernel's proc connector (needs root in the host's pid and network namespaces), so a SIGKILL from outside (an operator, the OOM killer) does not count towards the crash-loop protection")
	f.IntVar(&cfg.StageAbove, "stage-above", server.DefaultStageAbove, "a streamed write (add-flows, replace-flows, the Go client's large Put and Sync) of more entries than this is staged on disk instead of held in memory: 50–80 MB whatever its size, where one held in memory needs about 1.2 KB an entry")
	f.DurationVar(&cfg.WedgeAfter, "wedge-after", 2*time.Minute, "an operation on the switch, the flag or the store running this long counts as wedged: health turns NOT_SERVING, the systemd watchdog and the guard lease stop")
	f.BoolVar(&cfg.TakeOver, "take-over", false, "manage bridges that another flowstate store managed, or that hold flows this store never declared, deleting those flows at the first replay (use once, to adopt a bridge; see docs/operations.md)")
	f.StringVar(&owned, "owned-cookie", "0/0", "VALUE/MASK: manage only the flows whose cookie matches (cookie&MASK == VALUE) on every managed bridge; the others belong to another controller and are left alone, and restored from a mirror after a vswitchd restart (0/0: every flow)")
	f.StringVar(&cfg.Guard.Mode, "guard", server.GuardSpawn, "who releases the node if flowstated dies or hangs: spawn (start a guard process), external (a guard unit or container runs 'flowstated guard'; without it the flag stays disarmed), off")
	f.StringVar(&cfg.Guard.Lease, "guard-lease", defaultLease, "lease file flowstated renews and the guard watches")
	f.DurationVar(&cfg.Guard.Grace, "guard-grace", guard.DefaultGrace, "how long flowstated may be dead or wedged before the guard clears flow-restore-wait; a guard with a longer --grace is not trusted")
	f.DurationVar(&cfg.Guard.StartTimeout, "guard-start-timeout", server.DefaultGuardStartTimeout, "at start, how long to wait for a guard to prove itself (its heartbeat) before serving without one, flow-restore-wait disarmed; the API socket, health SERVING and READY=1 wait for it")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful stop waits for in-flight calls")
	f.IntVar(&cfg.MaxConnsPerUID, "max-conns-per-uid", server.DefaultMaxConnsPerUID, "API connections one peer uid may hold at once; more are refused (counted in flowstate_api_connections_refused_total, logged once per episode)")
	f.StringArrayVar(&proxies, "openflow-proxy", nil, "MODULE=BRIDGE: serve an OpenFlow socket <openflow-proxy-dir>/BRIDGE.mgmt that looks like vswitchd's and record what the controller connected to it installs as MODULE's entries (repeatable, one per bridge; BRIDGE must be managed); point the controller there by its OVS run directory (OVS_RUNDIR for ovn-controller)")
	f.StringArrayVar(&proxyTCP, "openflow-proxy-tcp", nil, "BRIDGE=HOST:PORT: the proxy of BRIDGE also accepts controllers on this loopback TCP address, for those that dial a switch over TCP (os-ken's --ofp-switch-address-list); without --module-writer rules any local user can connect to it, as to vswitchd's own ptcp:, with rules only the module's writers (the owner of the peer's socket) and root are relayed (repeatable)")
	f.StringVar(&cfg.ProxyDir, "openflow-proxy-dir", server.DefaultProxyDir, "directory of the OpenFlow proxies' <bridge>.mgmt sockets (not --ovs-rundir)")
	f.BoolVar(&proxyRelay, "openflow-proxy-relay", true, "the spawned guard shares the proxies' sockets and, while flowstated is away, relays their controllers straight to ovs-vswitchd (unrecorded; a controller's delete-all there deletes every flow of the bridge, other modules' too, as with plain Open vSwitch)")
	f.StringVar(&cfg.ProxyReady, "openflow-proxy-ready", server.ProxyReadyAuto, "when a proxied module counts as ready for the cold-start gate: auto (at its controller's first barrier after its first bundle commit) or manual (flowctl ready)")
	f.StringArrayVar(&writers, "module-writer", nil, "MODULE=uid:N or MODULE=gid:N: only root and these peers may write MODULE, over gRPC or as the controller behind its OpenFlow proxy (repeatable); without any, every peer that can open the socket may write every module")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error; at run time SIGUSR1 switches to debug and SIGUSR2 back to this level")
	f.StringVar(&cpuProf, "cpuprofile", "", "write a CPU profile of flowstated to `FILE` until it exits (for cmd/flowstate-bench; see docs/benchmarks.md)")
	cmd.AddCommand(newGuardCommand())
	cmd.SetVersionTemplate("{{.Version}}\n")
	return cmd
}

// defaultLease lives on a tmpfs: a reboot forgets it with the guard.
const defaultLease = "/run/flowstate/flowstated.lease"

func newGuardCommand() *cobra.Command {
	var (
		cfg       guard.Config
		logFormat string
		relays    []string
		proxyDir  string
		runDir    string
		inherit   bool
		writers   []string
	)
	cmd := &cobra.Command{
		Use:   "guard",
		Short: "Release the node (clear flow-restore-wait) when flowstated is dead or hung",
		Long: `Release the node (clear flow-restore-wait) when flowstated is dead or hung.

flowstated renews a lease while it is healthy. The guard clears
other_config:flow-restore-wait once the lease has not changed for --grace,
so ovs-vswitchd forwards as plain Open vSwitch would. flowstated starts one
by itself (--guard=spawn); under systemd and in Kubernetes run it as its own
unit or container (--guard=external), which outlives flowstated's.

The guard proves itself to flowstated with a heartbeat beside the lease
(<lease>.heartbeat), written after every round trip to its OVSDB: its pid,
its --grace and the Open_vSwitch row it reached. flowstated arms the flag
only while that heartbeat is fresh, names flowstated's own OVSDB and a
grace no longer than flowstated's --guard-grace.

With --openflow-relay the guard also holds flowstated's OpenFlow proxy
socket of each bridge (flowstated's --openflow-proxy), shared with
flowstated, and while flowstated is away (its lease stale) relays the
controllers connecting to it straight to ovs-vswitchd, unrecorded; once
flowstated renews its lease again those connections are closed, and the
controller reconnects through flowstated. Give it flowstated's
--openflow-proxy-dir and --ovs-rundir.`,
		Example:       `  flowstated guard --ovsdb unix:/var/run/openvswitch/db.sock --lease /run/flowstate/flowstated.lease`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, _, err := newLogger(logFormat, "info")
			if err != nil {
				return err
			}
			cfg.Logger = log
			w := server.Writers{}
			for _, s := range writers {
				if err := w.ParseWriter(s); err != nil {
					return fmt.Errorf("--module-writer: %w", err)
				}
			}
			if cfg.Relays, err = guardRelays(log, relays, w, proxyDir, runDir, inherit); err != nil {
				return err
			}
			return guard.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.OVSDB, "ovsdb", "unix:/var/run/openvswitch/db.sock", "ovsdb-server address")
	f.StringVar(&cfg.Lease, "lease", defaultLease, "lease file flowstated renews")
	f.DurationVar(&cfg.Grace, "grace", guard.DefaultGrace, "how long the lease may go unrenewed before the node is released")
	f.StringArrayVar(&relays, "openflow-relay", nil, "MODULE=BRIDGE, as flowstated's --openflow-proxy: hold its OpenFlow proxy socket <openflow-proxy-dir>/BRIDGE.mgmt and relay it to <ovs-rundir>/BRIDGE.mgmt while flowstated is away (repeatable)")
	f.StringArrayVar(&writers, "module-writer", nil, "MODULE=uid:N or MODULE=gid:N, as flowstated's: only root and these peers are relayed as MODULE's controller (repeatable)")
	f.StringVar(&proxyDir, "openflow-proxy-dir", server.DefaultProxyDir, "flowstated's --openflow-proxy-dir")
	f.StringVar(&runDir, "ovs-rundir", "/var/run/openvswitch", "directory of ovs-vswitchd's <bridge>.mgmt sockets")
	f.BoolVar(&inherit, "openflow-relay-inherit", false, "the --openflow-relay sockets are inherited, as descriptors 3, 4, ... in their order (set by flowstated for the guards it spawns); without it the guard binds them")
	f.BoolVar(&cfg.ExitWhenIdle, "exit-when-idle", false, "exit once flowstated is gone and the flag is clear, or at once if another guard runs (set by flowstated for the guards it spawns)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	cmd.AddCommand(newGuardProbeCommand())
	return cmd
}

// guardRelays are the guard's --openflow-relay sockets: inherited (fds 3,
// 4, ... in order) or to be bound by the guard.
func guardRelays(log *slog.Logger, specs []string, writers server.Writers, proxyDir, runDir string, inherit bool) ([]guard.Relay, error) {
	var out []guard.Relay
	for i, s := range specs {
		spec, err := server.ParseProxySpec(s)
		if err != nil {
			return nil, fmt.Errorf("--openflow-relay: %w", err)
		}
		br := spec.Bridge
		admit, err := writers.RelayAdmission(log, spec.Module)
		if err != nil {
			return nil, fmt.Errorf("--openflow-relay %q: %w", s, err)
		}
		r := guard.Relay{Bridge: br, Module: spec.Module, Admit: admit, Listen: filepath.Join(proxyDir, br+".mgmt"), Upstream: filepath.Join(runDir, br+".mgmt")}
		if inherit {
			ln, err := guard.ListenerFromFD(3+i, r.Listen)
			if err != nil {
				return nil, fmt.Errorf("--openflow-relay-inherit: descriptor %d for %s: %w", 3+i, br, err)
			}
			if got := ln.Addr().String(); got != r.Listen {
				ln.Close()
				return nil, fmt.Errorf("--openflow-relay-inherit: descriptor %d is the socket %s, want %s (--openflow-proxy-dir)", 3+i, got, r.Listen)
			}
			r.Listener = ln
		}
		out = append(out, r)
	}
	return out, nil
}

// systemdLiveness sends WATCHDOG=1 while the engine is responsive (at most
// every half watchdog interval) and STATUS= when the state line changes;
// without systemd both are no-ops.
// ovnRunDir is where OVN's daemons put their pidfiles and control sockets,
// as they decide it themselves (ovn_rundir()): $OVN_RUNDIR, else the
// packages' /var/run/ovn.
func ovnRunDir() string {
	if d := os.Getenv("OVN_RUNDIR"); d != "" {
		return d
	}
	return "/var/run/ovn"
}

func systemdLiveness() func(healthy bool, status string) {
	interval, _ := daemon.SdWatchdogEnabled(false)
	var lastPing time.Time
	var lastStatus string
	return func(healthy bool, status string) {
		if healthy && interval > 0 && time.Since(lastPing) >= interval/2 {
			_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			lastPing = time.Now()
		}
		if status != lastStatus {
			_, _ = daemon.SdNotify(false, "STATUS="+status)
			lastStatus = status
		}
	}
}

// newLogger is the daemon's logger at level, which the returned LevelVar
// changes at run time (levelSignals).
func newLogger(format, level string) (*slog.Logger, *slog.LevelVar, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	v := new(slog.LevelVar)
	v.Set(lvl)
	opts := &slog.HandlerOptions{Level: v, ReplaceAttr: durationsAsText}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), v, nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), v, nil
	}
	return nil, nil, errors.New("--log-format: want text or json")
}

// durationsAsText writes a duration as Go writes it ("10s"): slog's JSON
// handler would write nanoseconds (10000000000), which nobody reads at 3 a.m.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// levelSignals changes the log level at run time, without a restart: SIGUSR1
// to debug, SIGUSR2 back to the level the daemon started with. It stops when
// the returned function is called.
func levelSignals(log *slog.Logger, level *slog.LevelVar) (stop func()) {
	start := level.Level()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				to := start
				if sig == syscall.SIGUSR1 {
					to = slog.LevelDebug
				}
				from := level.Level()
				level.Set(to)
				// At WARN, so the change shows at any level.
				log.Warn("log level changed", "signal", sig.String(), "from", from.String(), "to", to.String())
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		<-exited
	}
}

// startCPUProfile profiles this process into path until the returned stop is
// called: flowstate-bench runs flowstated as its own process, so its profile
// has to be written from inside.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
