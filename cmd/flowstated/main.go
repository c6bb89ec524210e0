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
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/flowstate-io/flowstate/server"
	"github.com/flowstate-io/flowstate/server/restore"
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
		cfg       server.Config
		logFormat string
		logLevel  string
		writers   []string
	)
	cmd := &cobra.Command{
		Use:           "flowstated",
		Short:         "Keep Open vSwitch flows across ovs-vswitchd restarts",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logFormat, logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.Writers = server.Writers{}
			for _, w := range writers {
				if err := cfg.Writers.ParseWriter(w); err != nil {
					return fmt.Errorf("--module-writer: %w", err)
				}
			}
			// libOpenflow logs through klog; keep one log stream.
			klog.SetSlogLogger(log.With("component", "libOpenflow"))
			cfg.Ready = func() { _, _ = daemon.SdNotify(false, daemon.SdNotifyReady) }
			err = server.Run(cmd.Context(), cfg)
			_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.RunDir, "ovs-rundir", "/var/run/openvswitch", "directory of ovs-vswitchd's <bridge>.mgmt sockets")
	f.StringVar(&cfg.OVSDB, "ovsdb", "unix:/var/run/openvswitch/db.sock", "ovsdb-server address")
	f.StringArrayVar(&cfg.Bridges, "bridge", []string{"br-int"}, "bridge to manage (repeatable)")
	f.StringVar(&cfg.DBPath, "db", "/var/lib/flowstate/flowstate.db", "state file")
	f.StringVar(&cfg.Listen, "listen", "unix:///run/flowstate/flowstate.sock", "gRPC listen address")
	f.StringVar(&cfg.UnmanagedBridges, "unmanaged-bridges", string(restore.UnmanagedPreserve), "bridges of vswitchd not given with --bridge: preserve (mirror their flows, groups and meters and restore them after a gated vswitchd restart, as ovs-save would) or ignore (they come back as vswitchd makes them)")
	f.DurationVar(&cfg.MirrorInterval, "mirror-interval", restore.DefaultMirrorInterval, "pause between dumps that keep the mirror of an unmanaged bridge current")
	f.StringVar(&cfg.BootIDFile, "boot-id-file", "/proc/sys/kernel/random/boot_id", "file holding the host boot id")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9452", "HTTP address of /metrics and /healthz (empty disables)")
	f.DurationVar(&cfg.EchoInterval, "ofp-echo-interval", server.DefaultEchoInterval, "OpenFlow echo request interval on an idle bridge connection")
	f.DurationVar(&cfg.EchoTimeout, "ofp-echo-timeout", server.DefaultEchoTimeout, "declare a bridge connection dead after this long without an echo reply")
	f.BoolVar(&cfg.RearmFlowRestoreWait, "rearm-flow-restore-wait", true, "set flow-restore-wait back to true after each restore, so a crashed vswitchd also restarts gated (cleared again on a graceful stop)")
	f.StringArrayVar(&cfg.RequiredModules, "require-module", nil, "module that must be ready before a cold start replays (repeatable)")
	f.DurationVar(&cfg.ReadinessTimeout, "readiness-timeout", 5*time.Minute, "after a cold start, replay the last known state if required modules are not ready by then")
	f.DurationVar(&cfg.AuditInterval, "audit-interval", 0, "re-check every bridge against the desired state at this interval and correct drift (0 disables)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful stop waits for in-flight calls")
	f.StringArrayVar(&writers, "module-writer", nil, "MODULE=uid:N or MODULE=gid:N: only root and these peers may write MODULE (repeatable); without any, every peer that can open the socket may write every module")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	return cmd
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, errors.New("--log-format: want text or json")
}
