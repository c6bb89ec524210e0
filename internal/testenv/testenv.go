package testenv

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server"
)

// Env is one sandbox and the flowstated of a test. Its fields are set by New
// and stay the same for the Env's life, except Config (tests may change it
// before Start) and Daemon.
type Env struct {
	t testing.TB

	// Sandbox is the private Open vSwitch.
	Sandbox *sandbox.Sandbox
	// Config is what Start runs flowstated with.
	Config server.Config
	// Sock is flowstated's API socket path, without a scheme; Config.Listen
	// is "unix://" + Sock.
	Sock string
	// Client is connected to Sock (gRPC dials lazily, so it rides out
	// flowstated being stopped and started); closed at cleanup.
	Client *client.Client
	// Daemon is the running flowstated; nil before Start and after Stop.
	Daemon *server.Daemon
}

// Option changes what New sets up.
type Option func(*settings)

type settings struct {
	bridges   []string
	level     slog.Level
	toFile    bool
	configure []func(*server.Config)
}

// Bridges makes the sandbox hold these bridges (default br-int), each with
// ports <bridge>-p1 and <bridge>-p2. Which of them flowstated manages is
// Config.Bridges (br-int by default; change it with Configure).
func Bridges(names ...string) Option {
	return func(s *settings) { s.bridges = names }
}

// LogLevel is the least level of flowstated's log records that reach the
// test log (default Info).
func LogLevel(l slog.Level) Option {
	return func(s *settings) { s.level = l }
}

// LogToFile sends flowstated's log records of LogLevel and above to the
// file flowstated.log in the sandbox's directory instead of the test log,
// as a production flowstated's go to its journal: what a benchmark wants
// to pay for them.
func LogToFile() Option {
	return func(s *settings) { s.toFile = true }
}

// Configure changes the flowstated configuration New builds, in order.
func Configure(fs ...func(*server.Config)) Option {
	return func(s *settings) { s.configure = append(s.configure, fs...) }
}

// New starts a sandbox with its bridges and ports, writes a boot id file,
// builds the Config of a flowstated for it and connects a client. It does
// not start flowstated: see Start.
func New(ctx context.Context, t testing.TB, opts ...Option) *Env {
	t.Helper()
	s := settings{bridges: []string{"br-int"}, level: slog.LevelInfo}
	for _, o := range opts {
		o(&s)
	}
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(sb.VswitchdLog()); err == nil {
				t.Logf("vswitchd log tail:\n%s", tail(string(b), 20))
			}
		}
		_ = sb.Close()
	})
	for _, br := range s.bridges {
		if err := sb.AddBridge(ctx, br); err != nil {
			t.Fatal(err)
		}
		for i, p := range []string{"p1", "p2"} {
			if err := sb.AddPort(ctx, br, br+"-"+p, i+1); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := sb.Dir()
	bootID := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(bootID, []byte("test-boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &Env{t: t, Sandbox: sb, Sock: filepath.Join(dir, "fs.sock")}
	e.Config = server.Config{
		Listen: "unix://" + e.Sock, DBPath: filepath.Join(dir, "flowstate.db"), BootIDFile: bootID,
		RunDir: sb.RunDir(), OVSDB: sb.DBAddr(), Bridges: []string{"br-int"},
		// A dead vswitchd is noticed within 3 s, and Watch heartbeats come
		// fast enough for tests to wait on them.
		EchoInterval: time.Second, EchoTimeout: 2 * time.Second,
		EventHeartbeat: 200 * time.Millisecond,
		// Inside the sandbox's short directory, so that a proxy's socket
		// path fits a sockaddr_un; removed with it.
		ProxyDir: filepath.Join(dir, "ofp"),
		Logger:   Logger(t, s.level),
	}
	if s.toFile {
		f, err := os.Create(filepath.Join(dir, "flowstated.log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		e.Config.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: s.level}))
	}
	for _, f := range s.configure {
		f(&e.Config)
	}
	e.Client = e.Dial(e.Config.Listen)
	t.Cleanup(e.Stop)
	return e
}

// ProxySocket is the path of flowstated's OpenFlow proxy socket for
// bridge (Config.Proxies, in Config.ProxyDir).
func (e *Env) ProxySocket(bridge string) string {
	return filepath.Join(e.Config.ProxyDir, bridge+".mgmt")
}

// Start is New, then Start and WaitConverged on the Env: a flowstated
// running and converged.
func Start(ctx context.Context, t testing.TB, opts ...Option) *Env {
	t.Helper()
	e := New(ctx, t, opts...)
	e.Start(ctx)
	e.WaitConverged(ctx)
	return e
}

// Start runs flowstated in this process with Config and returns once its
// API socket serves. It fails the test if flowstated does not start.
func (e *Env) Start(ctx context.Context) {
	e.t.Helper()
	if e.Daemon != nil {
		e.t.Fatal("testenv: flowstated is already running")
	}
	d, err := server.Start(ctx, e.Config)
	if err != nil {
		e.t.Fatalf("testenv: start flowstated: %v", err)
	}
	e.Daemon = d
}

// Stop stops flowstated gracefully, if it runs; an error it stops with
// fails the test.
func (e *Env) Stop() {
	if e.Daemon == nil {
		return
	}
	if err := e.Daemon.Stop(); err != nil {
		e.t.Errorf("testenv: flowstated stopped with: %v", err)
	}
	e.Daemon = nil
}

// WaitConverged returns once the gate is open and every managed bridge is
// converged or excused (client.WaitConverged), failing the test with what
// is missing when ctx ends first.
func (e *Env) WaitConverged(ctx context.Context) *client.Status {
	e.t.Helper()
	st, err := e.Client.WaitConverged(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// Dial connects another client to target (a socket path, or a proxy in
// front of it); it is closed at cleanup.
func (e *Env) Dial(target string, opts ...client.Option) *client.Client {
	e.t.Helper()
	c, err := client.New(target, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Get fetches path ("/metrics", "/healthz") from the running flowstated's
// metrics listener (Config.MetricsListen, e.g. "127.0.0.1:0") and returns
// the status code and body.
func (e *Env) Get(ctx context.Context, path string) (int, string) {
	e.t.Helper()
	if e.Daemon == nil || e.Daemon.MetricsAddr() == "" {
		e.t.Fatal("testenv: no metrics listener: flowstated not running, or Config.MetricsListen empty")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Daemon.MetricsAddr()+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("testenv: GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("testenv: GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// Metrics scrapes /metrics, failing the test unless it answers 200.
func (e *Env) Metrics(ctx context.Context) string {
	e.t.Helper()
	code, body := e.Get(ctx, "/metrics")
	if code != http.StatusOK {
		e.t.Fatalf("testenv: GET /metrics: status %d: %s", code, body)
	}
	return body
}

// Poll calls cond every 10 ms until it returns true, failing the test when
// it returns an error or ctx ends first; what names the condition in the
// failure.
func Poll(ctx context.Context, t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// Logger is a slog text logger writing records of level and above to the
// test log.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(Writer(t), &slog.HandlerOptions{Level: level}))
}

// Writer is an io.Writer that logs each write as one line of the test log,
// for the stderr of processes a test starts.
func Writer(t testing.TB) io.Writer { return logWriter{t} }

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
