package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// OVNInstallHint is the advice every "OVN is missing" error carries.
const OVNInstallHint = "install OVN: apt-get update && apt-get install -y ovn-host ovn-central"

// ErrOVNNotInstalled reports a missing OVN binary or schema. Its text is
// OVNInstallHint.
var ErrOVNNotInstalled = errors.New(OVNInstallHint)

// File names of the OVN control plane inside the sandbox directory.
const (
	nbName         = "ovnnb"
	sbName         = "ovnsb"
	northdName     = "ovn-northd"
	controllerName = "ovn-controller"
)

// OVN is a private OVN control plane for a Sandbox: the northbound and
// southbound databases (each its own ovsdb-server), ovn-northd, and the
// ovn-controller of the sandbox's one chassis, which programs br-int of the
// sandbox's vswitchd. Everything lives in the sandbox directory. Its methods
// are safe for concurrent use; Close must be called before the Sandbox's.
type OVN struct {
	s   *Sandbox
	bin ovnBinaries

	lifeMu sync.Mutex // serialises controller lifecycle; held across waits

	mu         sync.Mutex // guards the fields below; never held across waits
	nb, sb     *proc
	northd     *proc
	controller *proc
	closed     bool
	bound      []string // logical ports BuildTopology bound on br-int
}

type ovnBinaries struct {
	northd, controller, nbctl, sbctl string
	nbSchema, sbSchema               string
}

// OVNBridge is the integration bridge ovn-controller creates and programs.
const OVNBridge = "br-int"

// StartOVN creates the NB and SB databases, starts their servers and
// ovn-northd, and points the sandbox's Open_vSwitch record at them
// (system-id hv1, geneve encapsulation on 127.0.0.1, dummy datapath for
// br-int). ovn-controller is not started: StartController does that, so a
// test can first put a proxy in front of br-int. On error nothing it started
// is left running.
func (s *Sandbox) StartOVN(ctx context.Context) (*OVN, error) {
	bin, err := findOVNBinaries()
	if err != nil {
		return nil, err
	}
	o := &OVN{s: s, bin: bin}
	if err := o.start(ctx); err != nil {
		_ = o.Close()
		return nil, err
	}
	return o, nil
}

func (o *OVN) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	s := o.s
	for _, db := range []struct {
		name, schema string
		dst          **proc
	}{{nbName, o.bin.nbSchema, &o.nb}, {sbName, o.bin.sbSchema, &o.sb}} {
		if _, err := s.run(ctx, s.bin.ovsdbTool, "create", s.path(db.name+".db"), db.schema); err != nil {
			return err
		}
		p, err := startProc(s.log, db.name, s.bin.ovsdbServer, []string{
			s.path(db.name + ".db"),
			"--remote=punix:" + s.path(db.name+".sock"),
			"--no-chdir",
			"--pidfile=" + s.path(db.name+".pid"),
			"--log-file=" + s.path(db.name+".log"),
			"--unixctl=" + s.path(db.name+".ctl"),
			"-vconsole:off",
		}, s.env, s.path(db.name+".out"))
		if err != nil {
			return err
		}
		o.mu.Lock()
		*db.dst = p
		o.mu.Unlock()
		if err := waitSocket(ctx, s.path(db.name+".sock"), p); err != nil {
			return fmt.Errorf("%w\n%s", err, s.tails(db.name))
		}
	}
	if _, err := o.Nbctl(ctx, "init"); err != nil {
		return err
	}
	northd, err := startProc(s.log, northdName, o.bin.northd, []string{
		"--ovnnb-db=" + o.NBAddr(),
		"--ovnsb-db=" + o.SBAddr(),
		"--no-chdir",
		"--pidfile=" + s.path(northdName+".pid"),
		"--log-file=" + s.path(northdName+".log"),
		"--unixctl=" + s.path(northdName+".ctl"),
		"-vconsole:off",
	}, o.env(s.RunDir()), s.path(northdName+".out"))
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.northd = northd
	o.mu.Unlock()
	if err := waitSocket(ctx, s.path(northdName+".ctl"), northd); err != nil {
		return fmt.Errorf("%w\n%s", err, s.tails(northdName))
	}
	_, err = s.Vsctl(ctx, "--no-wait", "set", "Open_vSwitch", ".",
		"external_ids:system-id=hv1",
		"external_ids:ovn-remote="+o.SBAddr(),
		"external_ids:ovn-encap-type=geneve",
		"external_ids:ovn-encap-ip=127.0.0.1",
		"external_ids:ovn-bridge="+OVNBridge,
		"external_ids:ovn-bridge-datapath-type=dummy")
	return err
}

// NBAddr and SBAddr are the databases' addresses, as ovn-nbctl --db takes.
func (o *OVN) NBAddr() string { return "unix:" + o.s.path(nbName+".sock") }

// SBAddr is the southbound database's address.
func (o *OVN) SBAddr() string { return "unix:" + o.s.path(sbName+".sock") }

// ControllerLog is the path of ovn-controller's log file.
func (o *OVN) ControllerLog() string { return o.s.path(controllerName + ".log") }

// env is the sandbox environment with OVS_RUNDIR set to rundir: that is
// where ovn-controller looks for <bridge>.mgmt (its ovs_rundir()), so a
// proxy's directory redirects it with no change to ovn-controller.
// OVN_RUNDIR stays the sandbox directory, for its control socket.
func (o *OVN) env(rundir string) []string {
	env := make([]string, 0, len(o.s.env)+2)
	for _, kv := range o.s.env {
		k, _, _ := strings.Cut(kv, "=")
		if k != "OVS_RUNDIR" && k != "OVN_RUNDIR" && k != "OVN_LOGDIR" && k != "OVN_DBDIR" {
			env = append(env, kv)
		}
	}
	return append(env, "OVS_RUNDIR="+rundir, "OVN_RUNDIR="+o.s.dir, "OVN_LOGDIR="+o.s.dir, "OVN_DBDIR="+o.s.dir)
}

// StartController starts ovn-controller against the sandbox's OVSDB.
// rundir is where it finds br-int.mgmt: "" for vswitchd's own socket, or a
// proxy's directory. It returns once the process runs and its control
// socket answers; programming the bridge takes longer (see Sync).
func (o *OVN) StartController(ctx context.Context, rundir string) error {
	o.lifeMu.Lock()
	defer o.lifeMu.Unlock()
	o.mu.Lock()
	closed, running := o.closed, o.controller != nil && !o.controller.exited()
	o.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if running {
		return errors.New("sandbox: ovn-controller is already running")
	}
	if rundir == "" {
		rundir = o.s.RunDir()
	}
	if n := len(filepath.Join(rundir, OVNBridge+".mgmt")); n > maxUnixSocketPath {
		return fmt.Errorf("sandbox: ovn-controller rundir %q too long: socket path would be %d bytes, the limit is %d", rundir, n, maxUnixSocketPath)
	}
	p, err := startProc(o.s.log, controllerName, o.bin.controller, []string{
		o.s.DBAddr(),
		"--no-chdir",
		"--pidfile=" + o.s.path(controllerName+".pid"),
		"--log-file=" + o.ControllerLog(),
		"-vconsole:off",
	}, o.env(rundir), o.s.path(controllerName+".out"))
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.controller = p
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	ctl := o.s.path(fmt.Sprintf("%s.%d.ctl", controllerName, p.pid()))
	if err := waitSocket(ctx, ctl, p); err != nil {
		return fmt.Errorf("%w\n%s", err, o.s.tails(controllerName))
	}
	return nil
}

// ControllerPID is ovn-controller's pid, or 0 when it is not running.
func (o *OVN) ControllerPID() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.controller == nil || o.controller.exited() {
		return 0
	}
	return o.controller.pid()
}

// StopController stops ovn-controller with SIGTERM, as an OVN upgrade
// would, and waits for it. ovn-controller leaves the bridge's flows in
// place when it exits this way.
func (o *OVN) StopController(ctx context.Context) error {
	return o.stopController(ctx, sigTerm)
}

// KillController kills ovn-controller with SIGKILL and waits for it.
func (o *OVN) KillController(ctx context.Context) error {
	return o.stopController(ctx, sigKill)
}

func (o *OVN) stopController(ctx context.Context, sig os.Signal) error {
	o.lifeMu.Lock()
	defer o.lifeMu.Unlock()
	o.mu.Lock()
	p := o.controller
	o.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.signal(sigCont)
	if err := p.signal(sig); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, stopGrace)
	defer cancel()
	if err := p.waitExit(ctx); err != nil {
		return err
	}
	o.mu.Lock()
	o.controller = nil
	o.mu.Unlock()
	return nil
}

// Nbctl runs ovn-nbctl against the sandbox's northbound database.
func (o *OVN) Nbctl(ctx context.Context, args ...string) (string, error) {
	return o.s.run(ctx, o.bin.nbctl, append([]string{"--db=" + o.NBAddr()}, args...)...)
}

// Sbctl runs ovn-sbctl against the sandbox's southbound database.
func (o *OVN) Sbctl(ctx context.Context, args ...string) (string, error) {
	return o.s.run(ctx, o.bin.sbctl, append([]string{"--db=" + o.SBAddr()}, args...)...)
}

// Sync waits until every chassis (here: the sandbox's one ovn-controller)
// has installed what the northbound database says, `ovn-nbctl --wait=hv
// sync`. ovn-controller reports progress on barrier replies, so this also
// shows that its OpenFlow connection works end to end.
//
// --wait=hv waits only for the chassis that have registered, so Sync first
// waits until this one (hv1) has: on a loaded machine a fresh
// ovn-controller may not have, and the sync would return at once.
func (o *OVN) Sync(ctx context.Context) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		out, err := o.Sbctl(ctx, "--bare", "--columns=name", "list", "Chassis_Private")
		if err == nil && strings.Contains(out, "hv1") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox: ovn-controller never registered chassis hv1: %w (last: %q, %w)", ctx.Err(), out, err)
		case <-tick.C:
		}
	}
	// --wait=hv only proves that ovn-controller installed what it had
	// computed when it saw the new nb_cfg: a port whose interface vswitchd
	// had not yet numbered is bound later. A port is up once its flows are
	// installed, so waiting for every bound port first makes the sync
	// cover them.
	if err := o.waitPortsUp(ctx, tick); err != nil {
		return err
	}
	_, err := o.Nbctl(ctx, "--wait=hv", "--timeout="+fmt.Sprint(nbctlTimeout(ctx)), "sync")
	return err
}

// waitPortsUp polls until every port BuildTopology bound is up.
func (o *OVN) waitPortsUp(ctx context.Context, tick *time.Ticker) error {
	o.mu.Lock()
	want := o.bound
	o.mu.Unlock()
	if len(want) == 0 {
		return nil
	}
	var down []string
	for {
		out, err := o.Nbctl(ctx, "--format=csv", "--data=bare", "--no-headings", "--columns=name,up", "list", "Logical_Switch_Port")
		if err == nil {
			up := map[string]bool{}
			for line := range strings.SplitSeq(out, "\n") {
				if name, state, ok := strings.Cut(strings.TrimSpace(line), ","); ok {
					up[name] = state == "true"
				}
			}
			down = down[:0]
			for _, p := range want {
				if !up[p] {
					down = append(down, p)
				}
			}
			if len(down) == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox: %d logical ports never came up (first %q): %w (last error: %v)", len(down), first(down), ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// nbctlTimeout is ctx's remaining time in whole seconds (at least 1, at
// most 120), for ovn-nbctl --timeout: without it, --wait=hv waits forever.
func nbctlTimeout(ctx context.Context) int {
	d := 120 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(1, int(d/time.Second))
}

// Close stops ovn-controller, ovn-northd and both database servers, in
// that order, and waits for them. Calls after the first return nil.
func (o *OVN) Close() error {
	o.lifeMu.Lock()
	defer o.lifeMu.Unlock()
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	procs := []*proc{o.controller, o.northd, o.sb, o.nb}
	o.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if p == nil {
			continue
		}
		if err := p.terminate(stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func findOVNBinaries() (ovnBinaries, error) {
	var b ovnBinaries
	for _, t := range []struct {
		name string
		dst  *string
	}{
		{"ovn-northd", &b.northd},
		{"ovn-controller", &b.controller},
		{"ovn-nbctl", &b.nbctl},
		{"ovn-sbctl", &b.sbctl},
	} {
		p, err := findBinary("", t.name)
		if err != nil {
			return ovnBinaries{}, fmt.Errorf("sandbox: %s not found in $PATH or %s: %w", t.name, strings.Join(defaultBinDirs, ", "), ErrOVNNotInstalled)
		}
		*t.dst = p
	}
	var dirs []string
	if d := os.Getenv("OVN_PKGDATADIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, "/usr/share/ovn", "/usr/local/share/ovn")
	for _, t := range []struct {
		file string
		dst  *string
	}{{"ovn-nb.ovsschema", &b.nbSchema}, {"ovn-sb.ovsschema", &b.sbSchema}} {
		for _, d := range dirs {
			if p := filepath.Join(d, t.file); fileExists(p) {
				*t.dst = p
				break
			}
		}
		if *t.dst == "" {
			return ovnBinaries{}, fmt.Errorf("sandbox: %s not found in %s: %w", t.file, strings.Join(dirs, ", "), ErrOVNNotInstalled)
		}
	}
	return b, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
