package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/guard"
	"github.com/flowstate-io/flowstate/server/restore"
	"github.com/flowstate-io/flowstate/server/restore/mirror"
	"github.com/flowstate-io/flowstate/server/restore/owner"
	"github.com/flowstate-io/flowstate/store"
)

// OpenFlow liveness defaults: a silent switch is declared gone at most
// DefaultEchoInterval+DefaultEchoTimeout after its last message.
const (
	DefaultEchoInterval = 2 * time.Second
	DefaultEchoTimeout  = 5 * time.Second
)

// gRPC keepalive defaults: a client silent for DefaultKeepaliveTime is
// pinged, and dropped (its session and watches with it) when the ping is not
// answered within DefaultKeepaliveTimeout: 15 s after its last frame.
const (
	DefaultKeepaliveTime    = 10 * time.Second
	DefaultKeepaliveTimeout = 5 * time.Second
)

// Config is everything flowstated needs; cmd/flowstated fills it from flags.
type Config struct {
	// Listen is the gRPC address: unix:///path (mode 0660). Required.
	Listen string
	// MetricsListen is the HTTP address of /metrics and /healthz; empty
	// disables it.
	MetricsListen string
	// DBPath is the bbolt file. Required.
	DBPath string
	// BootIDFile holds the host boot id. Default /proc/sys/kernel/random/boot_id.
	BootIDFile string
	// RunDir holds ovs-vswitchd's <bridge>.mgmt sockets. Required.
	RunDir string
	// OVSDB is the ovsdb-server address. Required.
	OVSDB string
	// OVNRunDir holds ovn-controller's pidfile and control socket, asked for
	// its version when status is (ovn.go); empty: not asked.
	OVNRunDir string
	// Bridges are the managed bridges. At least one.
	Bridges []string
	// EchoInterval and EchoTimeout tune OpenFlow liveness; zero: the
	// Default values.
	EchoInterval, EchoTimeout time.Duration
	// RequiredModules gate replays after a host reboot until each is ready,
	// for at most ReadinessTimeout.
	RequiredModules  []string
	ReadinessTimeout time.Duration
	// AuditInterval, when positive, re-checks every bridge at that interval
	// and corrects drift.
	AuditInterval time.Duration
	// KeepaliveTime and KeepaliveTimeout tune how fast a frozen gRPC client
	// is dropped; zero: the Default values.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MaxConnsPerUID caps the API connections one peer uid holds at once;
	// more are refused at the handshake (DefaultMaxConnsPerUID when 0).
	MaxConnsPerUID int
	// EventHeartbeat is the idle interval of Watch heartbeats. Default 10 s.
	EventHeartbeat time.Duration
	// Writers authorises writes per module by the peer's uid or gid; empty:
	// any peer that can open the socket may write.
	Writers Writers
	// UnmanagedBridges is what flowstated does with the bridges of vswitchd
	// not in Bridges: "preserve" (default) mirrors them and restores them
	// after a gated restart, "ignore" leaves them alone.
	UnmanagedBridges string
	// MirrorInterval is how often the mirror of an unmanaged bridge checks for change (and dumps after one).
	// Default mirror.DefaultInterval.
	MirrorInterval time.Duration
	// RearmFlowRestoreWait keeps flow-restore-wait armed while flowstated
	// runs (see restore.Config.Rearm).
	RearmFlowRestoreWait bool
	// MaxHold bounds how long a bridge that cannot be restored holds
	// flow-restore-wait for the others (restore.Config.MaxHold).
	MaxHold time.Duration
	// SurviveAfter and CrashWindow tune the crash-loop protection of
	// replays (restore.Config.SurviveAfter, CrashWindow).
	SurviveAfter, CrashWindow time.Duration
	// VswitchdLog and ProcExits are the evidence that tells a crash of
	// vswitchd from a kill from outside (restore.Config.VswitchdLog,
	// ProcExits); neither: every death during a replay counts.
	VswitchdLog string
	ProcExits   bool
	// StageAbove is the number of entries past which a streamed write
	// (PutStream, Sync) is staged on disk instead of held in memory
	// (DefaultStageAbove when 0).
	StageAbove int
	// WedgeAfter is how long one operation on the switch may run before the
	// engine counts as wedged (restore.Config.WedgeAfter).
	WedgeAfter time.Duration
	// OwnedCookie is the cookie space of the flows flowstated manages on
	// every managed bridge (restore.Config.OwnedCookie); zero: all.
	OwnedCookie entry.CookieSpace
	// TakeOver lets this flowstated manage bridges another store managed,
	// or that hold flows its store never declared (restore.Config.TakeOver).
	TakeOver bool
	// Guard releases the node when flowstated is dead or hung (GuardConfig).
	Guard GuardConfig
	// Proxies are the OpenFlow proxies (--openflow-proxy, proxies.go): a
	// socket <ProxyDir>/<bridge>.mgmt per proxied bridge, recording the
	// controller connected to it as its module. ProxyDir defaults to
	// DefaultProxyDir, ProxyReady (when the module is ready) to
	// ProxyReadyAuto.
	Proxies    []ProxySpec
	ProxyDir   string
	ProxyReady string
	// NoProxyRelay keeps the spawned guard from relaying the proxies
	// while flowstated is away (--openflow-proxy-relay=false): a
	// controller that shares its bridge with other modules could wipe
	// their flows there, as with plain Open vSwitch.
	NoProxyRelay bool
	// Liveness, when set, is called about every second with whether the
	// engine is responsive and a one-line state (systemd WATCHDOG=1 and
	// STATUS=).
	Liveness func(healthy bool, status string)
	// ShutdownTimeout bounds the graceful stop of gRPC. Default 10 s.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	// Ready, when set, is called once the API socket accepts connections.
	Ready func()
	// Faults injects faults, for tests (faults.go); nil in production.
	Faults *Faults

	// metricsBound receives the bound metrics address (Daemon.MetricsAddr).
	metricsBound func(addr string)
	// mirrorsBound receives the engine's mirrors before the API serves
	// (Daemon.Mirrors).
	mirrorsBound func(m mirrorState)
}

// Run serves until ctx is cancelled, then stops gracefully: gRPC first (with a
// deadline), then the engine, then the store, in reverse start order. A
// start that fails removes the store file (and its directories) if it
// created them: a new, empty store left behind would make the next start a
// different instance.
func Run(ctx context.Context, cfg Config) (err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.BootIDFile == "" {
		cfg.BootIDFile = "/proc/sys/kernel/random/boot_id"
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	// A frozen vswitchd must be declared gone well within 15 s.
	if cfg.EchoInterval <= 0 {
		cfg.EchoInterval = DefaultEchoInterval
	}
	if cfg.EchoTimeout <= 0 {
		cfg.EchoTimeout = DefaultEchoTimeout
	}
	if cfg.StageAbove <= 0 {
		cfg.StageAbove = DefaultStageAbove
	}
	if cfg.KeepaliveTime <= 0 {
		cfg.KeepaliveTime = DefaultKeepaliveTime
	}
	if cfg.KeepaliveTimeout <= 0 {
		cfg.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if cfg.MaxConnsPerUID <= 0 {
		cfg.MaxConnsPerUID = DefaultMaxConnsPerUID
	}
	log := cfg.Logger
	if err := cfg.Guard.validate(); err != nil {
		return err
	}
	if err := validateProxies(&cfg); err != nil {
		return err
	}
	bootID, err := readBootID(cfg.BootIDFile)
	if err != nil {
		return err
	}
	fresh, serving := missingPaths(cfg.DBPath), false
	defer func() {
		// After st.Close (deferred later, run earlier).
		if err != nil && !serving {
			removeCreated(log, fresh)
		}
	}()
	st, err := store.Open(cfg.DBPath, store.Options{Describe: describeEntry})
	if err != nil {
		return err
	}
	defer st.Close()
	// Store identity and one owner per bridge (restore/owner.go).
	self := owner.Instance{PID: os.Getpid(), StoreID: st.Identity().ID(), Listen: cfg.Listen, DB: cfg.DBPath}
	self.Host, _ = os.Hostname()
	locks, err := owner.LockBridges(cfg.RunDir, cfg.Bridges, self)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	defer locks.Close()
	if pre := st.File().Preflight(); pre.Empty {
		log.Warn("the store file was empty (0 bytes): a new store was created; bridges another store managed stand aside", "path", cfg.DBPath)
	}
	log.Info("store checked", "path", cfg.DBPath, "store", st.Identity().ID(), "check", st.File().CheckDuration())
	if m := st.File().Migrated(); m.From != 0 {
		log.Info("store migrated", "from_schema", m.From, "to_schema", store.SchemaVersion, "backup", m.Backup)
	}
	boot, err := st.Boots().Record(bootID, time.Now())
	if err != nil {
		return err
	}
	cold := boot.Cold()
	log.Info("store opened", "path", cfg.DBPath, "boot_id", bootID, "cold_start", cold, "boot_since", boot.Since)

	evlog := events.NewLog(events.Options{Heartbeat: cfg.EventHeartbeat, Logger: log})
	defer evlog.Close()
	keep := newKeeper(cfg.Guard, cfg.OVSDB, log, cfg.Liveness)
	keep.events = evlog
	if cfg.Guard.Mode != GuardOff {
		if keep.lease, err = guard.OpenLease(cfg.Guard.Lease); err != nil {
			return err
		}
		defer keep.lease.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	engine, err := restore.New(restore.Config{
		Store: st, RunDir: cfg.RunDir, OVSDB: cfg.OVSDB, Bridges: cfg.Bridges, Faults: cfg.Faults.engine(),
		EchoInterval: cfg.EchoInterval, EchoTimeout: cfg.EchoTimeout,
		Rearm:  cfg.RearmFlowRestoreWait,
		BootID: bootID, ColdStart: cold, GateSince: boot.Since,
		RequiredModules: cfg.RequiredModules, ReadinessTimeout: cfg.ReadinessTimeout,
		Unmanaged: mirror.Policy(cfg.UnmanagedBridges), MirrorInterval: cfg.MirrorInterval,
		AuditInterval: cfg.AuditInterval,
		MaxHold:       cfg.MaxHold, WedgeAfter: cfg.WedgeAfter, GuardPresent: keep.guardPresent,
		MaxReplayTime: cfg.MaxHold, SurviveAfter: cfg.SurviveAfter, CrashWindow: cfg.CrashWindow,
		VswitchdLog: cfg.VswitchdLog, ProcExits: cfg.ProcExits,
		TakeOver: cfg.TakeOver, Instance: self.String(), OwnedCookie: cfg.OwnedCookie,
		Events: evlog,
		Logger: log, Metrics: restore.NewMetrics(reg),
	})
	if err != nil {
		return err
	}
	if cfg.mirrorsBound != nil {
		cfg.mirrorsBound(engine)
	}

	sessions := newSessionTable(log)
	srvMetrics := grpcprom.NewServerMetrics()
	reg.MustRegister(srvMetrics)
	gs := grpc.NewServer(
		grpc.ForceServerCodec(utf8Codec{}),
		// Calls run on a few long-lived goroutines, whose stacks have
		// grown already, instead of one new goroutine a call; more calls
		// at once than workers still get one each.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.Creds(newPeerCreds(newConnLimit(cfg.MaxConnsPerUID, log, reg))),
		// Every reply is batched far below this; requests larger than it go
		// as streams (PutStream, Sync), whose errors say so.
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		// Detect silent clients: ping after KeepaliveTime idle, drop after
		// KeepaliveTimeout more. The server pings whether or not a call is
		// open, so an idle frozen client goes too.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.StatsHandler(sessions),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(
			srvMetrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(interceptorLogger(log), logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(callLevel)),
			recovery.UnaryServerInterceptor(recovery.WithRecoveryHandler(panicToStatus(log))),
			unaryVerdicts,
		),
		grpc.ChainStreamInterceptor(
			srvMetrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(interceptorLogger(log), logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(callLevel)),
			recovery.StreamServerInterceptor(recovery.WithRecoveryHandler(panicToStatus(log))),
			streamVerdicts,
		),
	)
	// The stream workers run from NewServer on: a return before the API
	// serves (a listener refused, a stop while the guard is awaited) ends
	// them too. After stopGRPC, Stop does nothing more.
	defer gs.Stop()
	proxies := &proxies{log: log}
	defer proxies.close()
	gs.RegisterService(withDecodeErrors(&flowstatev1.FlowStateService_ServiceDesc), &service{
		writes: engine.Writes(), reads: engine, state: engine, ready: engine, replays: engine, flag: engine.Flag(),
		store: st, events: evlog, writers: cfg.Writers, streamID: newStreamID(), bootID: bootID, coldStart: cold, keep: keep,
		sessions: sessions, log: log, stageAbove: cfg.StageAbove, faults: cfg.Faults, proxies: proxies, owned: cfg.OwnedCookie,
		ovn: newOVNController(cfg.OVNRunDir, log),
	})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	srvMetrics.InitializeMetrics(gs)

	keep.engine, keep.flag, keep.hs = engine, engine.Flag(), hs
	reg.MustRegister(&stateCollector{engine: engine, flag: engine.Flag(), keep: keep, store: st, log: log})
	reg.MustRegister(proxyCollector{proxies})
	runCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	// Start-up, in this order, so that serving means protected:
	//  1. The keeper renews the lease and spawns (or finds) a guard.
	//  2. Wait, bounded, until that guard has proven itself (its
	//     heartbeat), so the engine never arms the flag on nothing and
	//     reports no missing guard at a normal start.
	//  3. The engine runs: replays, clears and re-arms the flag.
	//  4. The API socket, health SERVING and READY=1 (Config.Ready): a
	//     prestart or ovs-restart right after finds a guard.
	// The proxies' sockets before the guard, which holds them too
	// (proxies.listen); an external guard's after it proved itself, so
	// that it hands over the sockets it bound.
	if cfg.Guard.Mode != GuardExternal {
		if err := proxies.listen(&cfg); err != nil {
			stopEngine()
			return err
		}
		if !cfg.NoProxyRelay {
			keep.relays, keep.writers = proxies.relays(&cfg), cfg.Writers
		}
	}
	wg.Go(func() { keep.run(runCtx) })
	keep.waitProven(ctx)
	if ctx.Err() != nil {
		stopEngine()
		wg.Wait()
		return nil
	}
	if cfg.Guard.Mode == GuardExternal {
		if err := proxies.listen(&cfg); err != nil {
			stopEngine()
			wg.Wait()
			return err
		}
	}
	proxies.adopt(&cfg, engine.Owners()) // before the first replay
	wg.Go(func() { engine.Run(runCtx) })
	// The proxies once the engine runs: a controller's change needs the
	// engine's write owner, and a socket that exists must accept.
	if err := proxies.start(&cfg, engine.Writes(), engine.Owners(), evlog); err != nil {
		stopEngine()
		wg.Wait()
		return err
	}
	proxies.serve(runCtx, &wg)
	lis, err := listenUnix(cfg.Listen)
	if err != nil {
		proxies.close()
		stopEngine()
		wg.Wait()
		return err
	}
	serveErr := make(chan error, 2)
	wg.Go(func() { serveErr <- gs.Serve(lis) })

	var hsrv *http.Server
	metricsAddr := "" // the bound address: --metrics-listen may say port 0
	if cfg.MetricsListen != "" {
		mlis, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			gs.Stop()
			proxies.close()
			stopEngine()
			wg.Wait()
			return fmt.Errorf("server: metrics listener: %w", err)
		}
		metricsAddr = mlis.Addr().String()
		if cfg.metricsBound != nil {
			cfg.metricsBound(metricsAddr)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", keep.healthz)
		hsrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		wg.Go(func() {
			if err := hsrv.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("server: metrics: %w", err)
			}
		})
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	serving = true
	log.Info("serving", "listen", cfg.Listen, "metrics", metricsAddr, "bridges", cfg.Bridges)
	if cfg.Ready != nil {
		cfg.Ready()
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	}
	log.Info("stopping")
	hs.Shutdown()
	evlog.Close() // ends Watch streams, which would hold GracefulStop
	stopGRPC(gs, cfg.ShutdownTimeout)
	if hsrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		_ = hsrv.Shutdown(sctx)
		cancel()
	}
	// The proxies before the engine: their sessions' changes go through
	// it. Their controllers see the connection close, as at a vswitchd
	// stop, and reconnect to the next flowstated.
	proxies.close()
	stopEngine()
	wg.Wait()
	log.Info("stopped")
	return runErr
}
