package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// InstallHint is the advice every "OVS is missing" error carries.
const InstallHint = "install Open vSwitch: apt-get update && apt-get install -y openvswitch-switch"

var (
	// ErrNotInstalled reports a missing Open vSwitch binary or schema. Its
	// text is InstallHint.
	ErrNotInstalled = errors.New(InstallHint)
	// ErrClosed is returned by lifecycle methods after Close.
	ErrClosed = errors.New("sandbox: closed")
)

// Options configures Start. The zero value is ready to use.
type Options struct {
	// Dir is the sandbox directory (optional). It must exist and be short:
	// unix socket paths are limited to 107 bytes. Default: a new
	// os.MkdirTemp("", "ovs") directory, removed by Close. A Dir given here
	// belongs to the caller and is left in place by Close.
	Dir string
	// Logger receives lifecycle events (optional; nil discards).
	Logger *slog.Logger
	// BinDir is the only directory searched for the OVS binaries
	// (optional). Default: $PATH, then /usr/sbin, /usr/local/sbin, /sbin.
	BinDir string
	// Schema is the path of vswitch.ovsschema (optional). Default:
	// $OVS_PKGDATADIR/vswitch.ovsschema, then /usr/share/openvswitch and
	// /usr/local/share/openvswitch.
	Schema string
	// KeepDir leaves a directory created by Start in place after Close, to
	// read the daemons' logs (optional).
	KeepDir bool
}

// File names inside the sandbox directory.
const (
	dbFile            = "conf.db"
	dbSock            = "db.sock"
	ovsdbName         = "ovsdb-server"
	vswitchdName      = "ovs-vswitchd"
	vswitchdCtl       = "ovs-vswitchd.ctl"
	vswitchdPidfile   = "ovs-vswitchd.pid"
	vswitchdLog       = "ovs-vswitchd.log"
	vswitchdOut       = "ovs-vswitchd.out"
	maxUnixSocketPath = 107
)

// readyTimeout caps every readiness wait, so a caller passing
// context.Background() still gets an error instead of a hang.
const readyTimeout = 30 * time.Second

// stopGrace is how long Close waits after SIGTERM (and again after SIGKILL).
const stopGrace = 5 * time.Second

// Sandbox is a private ovsdb-server and ovs-vswitchd. Its methods are safe
// for concurrent use; lifecycle methods (Start/Stop/Kill/Restart/Freeze/
// Thaw/Close of vswitchd) are serialised. Close must be called.
type Sandbox struct {
	dir     string
	ownDir  bool
	keepDir bool
	log     *slog.Logger
	bin     binaries
	schema  string // vswitch.ovsschema, for StartReplica
	env     []string

	lifeMu sync.Mutex // serialises lifecycle operations; held across waits

	mu       sync.Mutex // guards the fields below; never held across waits
	ovsdb    *proc
	vswitchd *proc
	frozen   bool
	closed   bool
}

type binaries struct {
	ovsdbTool, ovsdbServer, vswitchd, vsctl, ofctl, appctl string
}

// Start creates the database, starts ovsdb-server and ovs-vswitchd with the
// dummy datapath, and initialises the database. On error nothing is left
// running.
func Start(ctx context.Context, opts Options) (*Sandbox, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bin, err := findBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	schema, err := findSchema(opts.Schema)
	if err != nil {
		return nil, err
	}

	s := &Sandbox{log: log, bin: bin, schema: schema, keepDir: opts.KeepDir}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "ovs")
		if err != nil {
			return nil, fmt.Errorf("sandbox: create dir: %w", err)
		}
		s.dir, s.ownDir = dir, true
	} else {
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("sandbox: dir %q: %w", opts.Dir, err)
		}
		s.dir = dir
	}
	s.env = sandboxEnv(s.dir)
	s.log = log.With("dir", s.dir)

	if err := s.start(ctx, schema); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sandbox) start(ctx context.Context, schema string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	// A bridge name of 15 bytes, the Linux interface name limit, must fit.
	if n := len(s.MgmtPath("123456789012345")); n > maxUnixSocketPath {
		return fmt.Errorf("sandbox: dir %q too long: socket paths would be %d bytes, the limit is %d", s.dir, n, maxUnixSocketPath)
	}
	if _, err := s.run(ctx, s.bin.ovsdbTool, "create", s.path(dbFile), schema); err != nil {
		return err
	}

	if err := s.startOVSDB(ctx); err != nil {
		return err
	}
	if _, err := s.Vsctl(ctx, "--no-wait", "init"); err != nil {
		return err
	}

	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	return s.startVswitchd(ctx)
}

// Dir is the sandbox directory: database, sockets, pidfiles and logs.
func (s *Sandbox) Dir() string { return s.dir }

// RunDir is where vswitchd places <bridge>.mgmt (its OVS_RUNDIR).
func (s *Sandbox) RunDir() string { return s.dir }

// DBAddr is the OVSDB address in the form libovsdb and ovs-vsctl --db take.
func (s *Sandbox) DBAddr() string { return "unix:" + s.path(dbSock) }

// MgmtPath is the path of bridge's OpenFlow management socket.
func (s *Sandbox) MgmtPath(bridge string) string { return s.path(bridge + ".mgmt") }

// VswitchdLog is the path of vswitchd's log file.
func (s *Sandbox) VswitchdLog() string { return s.path(vswitchdLog) }

// Env is the environment (os.Environ with OVS_* overridden) that points
// ovs-* tools at this sandbox, e.g. for `ovs-ofctl dump-flows br0`.
func (s *Sandbox) Env() []string { return append([]string(nil), s.env...) }

func (s *Sandbox) path(name string) string { return filepath.Join(s.dir, name) }

// Close stops vswitchd and ovsdb-server and waits for them, then removes
// the directory if Start created it. Calls after the first return nil.
func (s *Sandbox) Close() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	vs, db := s.vswitchd, s.ovsdb
	s.mu.Unlock()

	var errs []error
	// Reverse start order: vswitchd depends on ovsdb-server.
	for _, p := range []*proc{vs, db} {
		if p == nil {
			continue
		}
		if err := p.terminate(stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	s.vswitchd, s.frozen = nil, false
	s.mu.Unlock()
	if s.ownDir && !s.keepDir && len(errs) == 0 {
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: remove dir: %w", err))
		}
	}
	s.log.Debug("sandbox closed")
	return errors.Join(errs...)
}

// Vsctl runs ovs-vsctl --db=<DBAddr> args... and returns its stdout. Without
// --no-wait in args, ovs-vsctl waits for vswitchd to apply the change, so
// pass --no-wait while vswitchd is down or frozen.
func (s *Sandbox) Vsctl(ctx context.Context, args ...string) (string, error) {
	return s.run(ctx, s.bin.vsctl, append([]string{"--db=" + s.DBAddr()}, args...)...)
}

// Ofctl runs ovs-ofctl -O OpenFlow15 args... in the sandbox environment, so
// a bridge name stands for unix:<RunDir>/<bridge>.mgmt.
func (s *Sandbox) Ofctl(ctx context.Context, args ...string) (string, error) {
	return s.run(ctx, s.bin.ofctl, append([]string{"-O", "OpenFlow15"}, args...)...)
}

// Appctl runs ovs-appctl against vswitchd's control socket.
func (s *Sandbox) Appctl(ctx context.Context, args ...string) (string, error) {
	return s.run(ctx, s.bin.appctl, append([]string{"-t", s.path(vswitchdCtl)}, args...)...)
}

// AddBridge adds a bridge with datapath_type=dummy and the default fail
// mode (standalone, so it starts with priority=0 actions=NORMAL). If
// vswitchd runs, it waits until the bridge's management socket accepts;
// otherwise it only writes the database.
func (s *Sandbox) AddBridge(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("sandbox: add bridge: empty name")
	}
	if n := len(s.MgmtPath(name)); n > maxUnixSocketPath {
		return fmt.Errorf("sandbox: add bridge %q: socket path would be %d bytes, the limit is %d", name, n, maxUnixSocketPath)
	}
	vs := s.runningVswitchd()
	args := []string{"--", "--may-exist", "add-br", name, "--", "set", "Bridge", name, "datapath_type=dummy"}
	if vs == nil {
		args = append([]string{"--no-wait"}, args...)
	}
	if _, err := s.Vsctl(ctx, args...); err != nil {
		return err
	}
	if vs == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := waitSocket(ctx, s.MgmtPath(name), vs); err != nil {
		return fmt.Errorf("sandbox: add bridge %s: %w\n%s", name, err, s.tails(vswitchdName))
	}
	return nil
}

// AddPort adds a dummy port to bridge with OpenFlow port number ofport. If
// vswitchd runs, it checks that vswitchd gave the port that number.
func (s *Sandbox) AddPort(ctx context.Context, bridge, port string, ofport int) error {
	if port == "" {
		return errors.New("sandbox: add port: empty name")
	}
	// 0xff00 (OFPP_MAX) and above are reserved port numbers.
	if ofport < 1 || ofport >= 0xff00 {
		return fmt.Errorf("sandbox: add port %s: ofport %d out of range [1, 65279]", port, ofport)
	}
	running := s.runningVswitchd() != nil
	args := []string{"--", "--may-exist", "add-port", bridge, port,
		"--", "set", "Interface", port, "type=dummy", "ofport_request=" + strconv.Itoa(ofport)}
	if !running {
		args = append([]string{"--no-wait"}, args...)
	}
	if _, err := s.Vsctl(ctx, args...); err != nil {
		return err
	}
	if !running {
		return nil
	}
	// ovs-vsctl waited for vswitchd to reconfigure, so ofport is final.
	out, err := s.Vsctl(ctx, "--no-wait", "get", "Interface", port, "ofport", "error")
	if err != nil {
		return err
	}
	lines := strings.SplitN(strings.TrimSpace(out), "\n", 2)
	if got := strings.TrimSpace(lines[0]); got != strconv.Itoa(ofport) {
		return fmt.Errorf("sandbox: add port %s: vswitchd assigned ofport %s, want %d (%s)", port, got, ofport, strings.TrimSpace(out))
	}
	return nil
}

// SetFlowRestoreWait sets other_config:flow-restore-wait=true, or removes
// the key (the way ovs-ctl clears it), with ovs-vsctl --no-wait: next_cfg is
// not bumped and nothing waits for vswitchd. See the package documentation
// for what a running vswitchd does with the change.
func (s *Sandbox) SetFlowRestoreWait(ctx context.Context, on bool) error {
	var err error
	if on {
		_, err = s.Vsctl(ctx, "--no-wait", "set", "Open_vSwitch", ".", "other_config:flow-restore-wait=true")
	} else {
		_, err = s.Vsctl(ctx, "--no-wait", "remove", "Open_vSwitch", ".", "other_config", "flow-restore-wait")
	}
	return err
}

// FlowRestoreWait reports other_config:flow-restore-wait as stored in the
// database (absent means false).
func (s *Sandbox) FlowRestoreWait(ctx context.Context) (bool, error) {
	out, err := s.Vsctl(ctx, "--no-wait", "--if-exists", "get", "Open_vSwitch", ".", "other_config:flow-restore-wait")
	if err != nil {
		return false, err
	}
	return strings.Trim(strings.TrimSpace(out), `"`) == "true", nil
}

// Cfg returns next_cfg and cur_cfg of the Open_vSwitch row: cur_cfg equal
// to next_cfg means vswitchd has applied the latest bumped configuration.
func (s *Sandbox) Cfg(ctx context.Context) (next, cur int64, err error) {
	out, err := s.Vsctl(ctx, "--no-wait", "get", "Open_vSwitch", ".", "next_cfg", "cur_cfg")
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("sandbox: unexpected next_cfg/cur_cfg output %q", out)
	}
	if next, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("sandbox: parse next_cfg: %w", err)
	}
	if cur, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("sandbox: parse cur_cfg: %w", err)
	}
	return next, cur, nil
}

// run executes a short-lived tool bounded by ctx and returns its stdout;
// stderr goes into the error.
func (s *Sandbox) run(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = s.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// If the tool is killed, do not wait forever for anything holding its
	// pipes; generous, because on a loaded machine copying a successful
	// tool's output can take over a second.
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	what := filepath.Base(bin) + " " + strings.Join(args, " ")
	msg := strings.TrimSpace(stderr.String())
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if msg == "" {
		return stdout.String(), fmt.Errorf("sandbox: %s: %w", what, err)
	}
	return stdout.String(), fmt.Errorf("sandbox: %s: %w: %s", what, err, msg)
}

// tails formats the end of a daemon's log and captured output for errors.
func (s *Sandbox) tails(name string) string {
	return fmt.Sprintf("--- %s.log (tail) ---\n%s\n--- %s stdout/stderr (tail) ---\n%s",
		name, tailFile(s.path(name+".log"), 20), name, tailFile(s.path(name+".out"), 10))
}

// sandboxEnv is os.Environ with every OVS directory pointed at dir. Unset,
// OVS_RUNDIR would put <bridge>.mgmt in /var/run/openvswitch, and
// OVS_SYSCONFDIR would make vswitchd read the host's /etc/openvswitch.
// OVS_PKGDATADIR stays: the tools find their schema through it.
func sandboxEnv(dir string) []string {
	set := map[string]bool{"OVS_RUNDIR": true, "OVS_DBDIR": true, "OVS_LOGDIR": true, "OVS_SYSCONFDIR": true}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			env = append(env, kv)
		}
	}
	for _, k := range []string{"OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"} {
		env = append(env, k+"="+dir)
	}
	return env
}

// defaultBinDirs are searched after $PATH: the daemons live in sbin, which
// an unprivileged user's PATH often lacks.
var defaultBinDirs = []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}

func findBinaries(binDir string) (binaries, error) {
	var b binaries
	for _, t := range []struct {
		name string
		dst  *string
	}{
		{"ovsdb-tool", &b.ovsdbTool},
		{"ovsdb-server", &b.ovsdbServer},
		{"ovs-vswitchd", &b.vswitchd},
		{"ovs-vsctl", &b.vsctl},
		{"ovs-ofctl", &b.ofctl},
		{"ovs-appctl", &b.appctl},
	} {
		p, err := findBinary(binDir, t.name)
		if err != nil {
			return binaries{}, err
		}
		*t.dst = p
	}
	return b, nil
}

func findBinary(binDir, name string) (string, error) {
	if binDir != "" {
		p := filepath.Join(binDir, name)
		if isExecutable(p) {
			return p, nil
		}
		return "", fmt.Errorf("sandbox: %s not found in %s: %w", name, binDir, ErrNotInstalled)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range defaultBinDirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("sandbox: %s not found in $PATH or %s: %w", name, strings.Join(defaultBinDirs, ", "), ErrNotInstalled)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func findSchema(schema string) (string, error) {
	if schema != "" {
		if _, err := os.Stat(schema); err != nil {
			return "", fmt.Errorf("sandbox: schema: %w", err)
		}
		return schema, nil
	}
	var dirs []string
	if d := os.Getenv("OVS_PKGDATADIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, "/usr/share/openvswitch", "/usr/local/share/openvswitch")
	for _, d := range dirs {
		p := filepath.Join(d, "vswitch.ovsschema")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("sandbox: vswitch.ovsschema not found in %s: %w", strings.Join(dirs, ", "), ErrNotInstalled)
}
