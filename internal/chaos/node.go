package chaos

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
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/server/guard"
)

// Bridges of a run: br-int is managed, br-ex unmanaged (mirrored).
const (
	Managed   = "br-int"
	Unmanaged = "br-ex"
)

// policy is the deny policy both bridges carry: TCP to DeniedIP dropped,
// everything else from port 1 out of port 2.
var policy = []string{
	"table=0,priority=100,tcp,nw_dst=" + DeniedIP + ",actions=drop",
	"table=0,priority=50,in_port=1,actions=output:2",
}

// DeniedIP and AllowedIP are the destinations of the prober's SYNs.
const (
	DeniedIP  = "10.0.0.99"
	AllowedIP = "10.0.0.2"
)

// timings of the flowstated a run starts; the hold invariant is derived
// from them.
const (
	guardGrace       = 3 * time.Second
	maxHold          = 4 * time.Second
	readinessTimeout = 5 * time.Second
)

// node is the sandbox and the flowstated process of one run.
type node struct {
	noRelay bool // flowstated runs with --openflow-proxy-relay=false
	// surviveAfter is flowstated's --survive-after (0: its default).
	surviveAfter time.Duration
	sb           *sandbox.Sandbox
	dir          string
	bin          string
	sock         string
	lease        string
	boot         int
	// state is the store's directory: its own small tmpfs when the
	// harness runs as root (tmpfs true), so disk-full can fill it.
	state string
	tmpfs bool
	log   *slog.Logger
	c     *client.Client
	// tcpAddr is the proxy's loopback TCP listener; child the copy of
	// the harness's binary the foreign writer runs as (foreign.go).
	tcpAddr string
	child   string

	mu      sync.Mutex
	cmd     *exec.Cmd
	waited  chan struct{}
	frozen  bool
	killing bool           // a SIGKILL or SIGTERM of ours is under way: its exit is expected
	downAt  time.Time      // when the last run ended (zero while one runs)
	downBy  syscall.Signal // the harness's signal that ended it (0: it exited by itself)
	out     bytes.Buffer   // every run's stderr
	started []int          // pids of every flowstated run, for the leftover check
	// ext is the external guard readonly-guard runs on a replica,
	// extDone closed once it has been waited for.
	ext     *exec.Cmd
	extDone chan struct{}
}

// newNode starts the sandbox and sets the node up; foreign: the schedule
// runs foreign-writes, whose child binary is copied now.
func newNode(ctx context.Context, bin string, log *slog.Logger, foreign bool) (*node, error) {
	sb, err := sandbox.Start(ctx, sandbox.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	n := &node{sb: sb, dir: sb.Dir(), bin: bin, log: log}
	if err := n.setup(ctx); err != nil {
		n.close()
		return nil, err
	}
	// Copied now, not at the first foreign-writes: a copy under load
	// takes seconds, and the step must land while its fault is on.
	if !foreign {
		return n, nil
	}
	if _, err := n.childBinary(); err != nil {
		log.Warn("no copy of the harness for the foreign writer: foreign-writes fails", "err", err)
	}
	return n, nil
}

func (n *node) setup(ctx context.Context) error {
	for _, br := range []string{Managed, Unmanaged} {
		if err := n.sb.AddBridge(ctx, br); err != nil {
			return err
		}
		for i, p := range []string{"p1", "p2"} {
			if err := n.sb.AddPort(ctx, br, br+"-"+p, i+1); err != nil {
				return err
			}
		}
	}
	// br-ex's policy is another controller's: flowstated only mirrors it.
	// The controller replaces the default flow, as one in secure fail mode
	// would.
	if _, err := n.sb.Ofctl(ctx, "del-flows", Unmanaged); err != nil {
		return err
	}
	for _, f := range policy {
		if _, err := n.sb.Ofctl(ctx, "add-flow", Unmanaged, f); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "run"), 0o750); err != nil {
		return err
	}
	n.state = filepath.Join(n.dir, "state")
	if err := os.MkdirAll(n.state, 0o750); err != nil {
		return err
	}
	n.tmpfs = mountTmpfs(ctx, n.state, n.log)
	n.sock = filepath.Join(n.dir, "run", "fs.sock")
	n.lease = filepath.Join(n.dir, "run", "lease")
	addr, err := freeLoopback()
	if err != nil {
		return err
	}
	n.tcpAddr = addr
	if err := n.newBoot(); err != nil {
		return err
	}
	c, err := client.New("unix://" + n.sock)
	if err != nil {
		return err
	}
	n.c = c
	return nil
}

// newBoot writes a new host boot id: the next flowstated start is cold.
func (n *node) newBoot() error {
	n.boot++
	return os.WriteFile(filepath.Join(n.dir, "boot_id"), fmt.Appendf(nil, "chaos-boot-%d\n", n.boot), 0o600)
}

func (n *node) args() []string {
	relay := "--openflow-proxy-relay=" + strconv.FormatBool(!n.noRelay)
	args := []string{relay,
		"--bridge", Managed, "--unmanaged-bridges", "preserve",
		"--ovs-rundir", n.sb.RunDir(), "--ovsdb", n.sb.DBAddr(),
		"--db", n.dbPath(), "--listen", "unix://" + n.sock,
		"--boot-id-file", filepath.Join(n.dir, "boot_id"), "--metrics-listen", "",
		"--guard", "spawn", "--guard-lease", n.lease, "--guard-grace", guardGrace.String(),
		"--max-hold", maxHold.String(), "--readiness-timeout", readinessTimeout.String(),
		"--require-module", "policy", "--mirror-interval", "500ms", "--audit-interval", "2s",
		"--stage-above", "200", "--ofp-echo-interval", "500ms", "--ofp-echo-timeout", "1500ms",
		"--openflow-proxy", Proxied + "=" + Managed, "--openflow-proxy-dir", n.proxyDir(),
		// Only root writes the proxied module (the harness's writers run
		// as root): foreign-writes tries as another uid on every listener.
		"--module-writer", Proxied + "=uid:0", "--openflow-proxy-tcp", Managed + "=" + n.tcpAddr,
	}
	if n.surviveAfter > 0 {
		args = append(args, "--survive-after", n.surviveAfter.String())
	}
	return args
}

// loopSurviveAfter is flowstated's --survive-after in a run that holds a
// crash loop's bulk: short, so that a bisection of crash suspects (one
// probe per survived replay, about 15 for the bulk) ends within the run and
// the poisoned check sees its verdict; at the default 10 s it outlasts the
// run. Other runs keep the default: the kept regressions' timed promises
// were measured with it (guard-killed-first's [hold] failed 3 of 3 under
// load with 2 s).
const loopSurviveAfter = 2 * time.Second

// proxyDir holds flowstated's OpenFlow proxy socket (Proxied's controller).
func (n *node) proxyDir() string { return filepath.Join(n.dir, "ofp") }

// proxySocket is the proxy's socket for br-int, where Proxied's controller
// dials (held by the guard too: server/guard/relay.go).
func (n *node) proxySocket() string { return filepath.Join(n.proxyDir(), Managed+".mgmt") }

func (n *node) dbPath() string { return filepath.Join(n.state, "fs.db") }

// storeSize is the store's tmpfs: room for the store, a backup spool and a
// staged write, small enough that filling it is quick.
const storeSize = "32m"

// mountTmpfs mounts a tmpfs of storeSize on dir. It needs root; without it
// the store stays on the sandbox's file system and disk-full cannot run.
func mountTmpfs(ctx context.Context, dir string, log *slog.Logger) bool {
	if os.Geteuid() != 0 {
		log.Warn("not root: the store is not on its own tmpfs, disk-full faults fail")
		return false
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "tmpfs", "-o", "size="+storeSize+",mode=0750", "tmpfs", dir).CombinedOutput(); err != nil {
		log.Warn("mount a tmpfs for the store: disk-full faults fail", "err", err, "out", strings.TrimSpace(string(out)))
		return false
	}
	return true
}

// tryStart runs flowstated in the foreground, outside the supervisor, for
// a start that must be refused: it returns its exit status and output, or
// an error once it has run for limit (it was killed: it did not refuse).
func (n *node) tryStart(ctx context.Context, limit time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.bin, n.args()...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return -1, string(out), fmt.Errorf("chaos: flowstated still ran after %v", limit)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out), nil
	}
	if err != nil {
		return -1, string(out), err
	}
	return 0, string(out), nil
}

// startFlowstated starts flowstated; it does not wait for it.
func (n *node) startFlowstated() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return errors.New("chaos: flowstated already running")
	}
	cmd := exec.Command(n.bin, n.args()...)
	fmt.Fprintf(&n.out, "--- flowstated start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd.Stderr = &lockedWriter{mu: &n.mu, w: &n.out}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start flowstated: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.cmd, n.waited, n.frozen, n.killing, n.downAt = cmd, done, false, false, time.Time{}
	n.started = append(n.started, cmd.Process.Pid)
	return nil
}

// alive reports whether flowstated runs and is not frozen.
func (n *node) alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.frozen {
		return false
	}
	select {
	case <-n.waited:
		return false
	default:
		return true
	}
}

// signalFlowstated sends sig; SIGKILL and SIGTERM wait for the exit (a
// SIGTERM that is not obeyed within 15 s is an error and becomes a SIGKILL).
func (n *node) signalFlowstated(sig syscall.Signal) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.waited
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		n.mu.Lock()
		n.killing = true
		n.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	n.mu.Lock()
	switch sig {
	case syscall.SIGSTOP:
		n.frozen = true
	case syscall.SIGCONT:
		n.frozen = false
	}
	n.mu.Unlock()
	if sig != syscall.SIGTERM && sig != syscall.SIGKILL {
		return nil
	}
	var err error
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		err = fmt.Errorf("chaos: flowstated did not stop within 15 s of %v", sig)
	}
	n.mu.Lock()
	n.cmd, n.downAt, n.downBy = nil, time.Now(), sig
	n.mu.Unlock()
	return err
}

// stoppedGracefully reports a flowstated stopped by the harness's SIGTERM
// (its guard then exits after the grace: nobody relays).
func (n *node) stoppedGracefully() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd == nil && n.downBy == syscall.SIGTERM
}

// deadSince is when flowstated stopped running, zero while a run is on
// (frozen or not).
func (n *node) deadSince() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return time.Time{}
	}
	return n.downAt
}

// exitedBySelf reports a flowstated that ended without a signal of ours.
func (n *node) exitedBySelf() (bool, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.killing {
		return false, ""
	}
	select {
	case <-n.waited:
		state := n.cmd.ProcessState.String()
		n.cmd, n.downAt, n.downBy = nil, time.Now(), 0
		return true, state
	default:
		return false, ""
	}
}

// guardPID is the pid the running guard wrote into its lock file, 0 if no
// guard holds the lock.
func (n *node) guardPID() int {
	if ok, err := guard.Present(n.lease); err != nil || !ok {
		return 0
	}
	b, err := os.ReadFile(guard.LockPath(n.lease))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// waitServing waits until flowstated's API answers.
func (n *node) waitServing(ctx context.Context) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := n.c.Status(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("chaos: flowstated not serving: %w", err)
		}
	}
}

// logs is every flowstated run's stderr and the guard's log.
func (n *node) logs() string {
	n.mu.Lock()
	s := n.out.String()
	n.mu.Unlock()
	if b, err := os.ReadFile(n.lease + ".guard.log"); err == nil {
		s += "--- guard log\n" + string(b)
	}
	return s
}

func (n *node) close() {
	_ = n.signalFlowstated(syscall.SIGKILL)
	n.stopExternalGuard()
	if n.lease == "" {
		// setup did not get that far
	} else if pid := n.guardPID(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if n.c != nil {
		_ = n.c.Close()
	}
	// Before the sandbox removes its directory, the mount point among it.
	if n.tmpfs {
		if out, err := exec.Command("umount", n.state).CombinedOutput(); err != nil {
			n.log.Warn("umount the store's tmpfs, detaching it", "err", err, "out", strings.TrimSpace(string(out)))
			_ = exec.Command("umount", "-l", n.state).Run()
		}
	}
	_ = n.sb.Close()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
