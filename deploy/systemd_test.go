package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// machine is this host's own file system booted by systemd-nspawn through
// an overlay (writes go to a tmpfs, the host's files stay as they are),
// with its own systemd as PID 1, a private network and no registration.
type machine struct {
	t    *testing.T
	dir  string // the tmpfs holding upper, work and root
	root string // the overlay, the machine's /
	cmd  *exec.Cmd
	pid1 int // the machine's init, in the host's pid namespace
	log  *bytes.Buffer
}

// bootMachine boots the machine and waits until its systemd has finished
// starting up. Cleanup stops it and removes the overlay on every path.
func bootMachine(ctx context.Context, t *testing.T, prepare func(root string)) *machine {
	t.Helper()
	nspawn, err := exec.LookPath("systemd-nspawn")
	if err != nil {
		t.Fatal("systemd-nspawn not found: install systemd-container (apt-get install systemd-container)")
	}
	m := &machine{t: t, dir: t.TempDir(), log: &bytes.Buffer{}}
	if err := syscall.Mount("tmpfs", m.dir, "tmpfs", 0, "mode=0700"); err != nil {
		t.Fatalf("mount tmpfs %s: %v", m.dir, err)
	}
	t.Cleanup(func() { m.unmount(m.dir) })
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.Mkdir(filepath.Join(m.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m.root = filepath.Join(m.dir, "root")
	opts := "lowerdir=/,upperdir=" + filepath.Join(m.dir, "upper") + ",workdir=" + filepath.Join(m.dir, "work")
	if err := syscall.Mount("overlay", m.root, "overlay", 0, opts); err != nil {
		t.Fatalf("mount overlay of / at %s: %v", m.root, err)
	}
	t.Cleanup(func() { m.unmount(m.root) })
	prepare(m.root)

	// A target of our own: the machine starts nothing of the host's
	// multi-user services; the test starts what it needs.
	m.write("/etc/systemd/system/flowstate-test.target", "[Unit]\nDescription=flowstate systemd test\nRequires=basic.target\nAfter=basic.target\n")
	m.cmd = exec.Command(nspawn, "--register=no", "--keep-unit", "--link-journal=no", "--private-network",
		"--console=pipe", "--boot", "-D", m.root, "--", "--unit=flowstate-test.target")
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.Stdin = nil
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- m.cmd.Wait() }()
	t.Cleanup(func() { m.stop(exited) })

	// The machine's PID 1: nspawn's child whose pid in its own namespace
	// is 1.
	for m.pid1 == 0 {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("systemd-nspawn exited before the machine booted: %v\n%s", err, m.log)
		case <-ctx.Done():
			t.Fatalf("no init of the machine appeared: %v\n%s", ctx.Err(), m.log)
		case <-time.After(20 * time.Millisecond):
		}
		m.pid1 = findInit(m.cmd.Process.Pid)
	}
	start := time.Now()
	for {
		out, err := m.run(ctx, "systemctl is-system-running --wait")
		state := strings.TrimSpace(out)
		if err == nil || state == "degraded" {
			t.Logf("machine booted (init pid %d) in %v: %s", m.pid1, time.Since(start).Round(time.Millisecond), state)
			return m
		}
		if ctx.Err() != nil {
			t.Fatalf("the machine did not finish booting: %s %v\n%s", out, err, m.log)
		}
		time.Sleep(50 * time.Millisecond) // its bus is not up yet
	}
}

// findInit is the child of nspawn that is PID 1 of its pid namespace.
func findInit(nspawn int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", nspawn, nspawn))
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if ns, ok := strings.CutPrefix(line, "NSpid:"); ok {
				if f := strings.Fields(ns); len(f) == 2 && f[1] == "1" {
					return pid
				}
			}
		}
	}
	return 0
}

// stop kills the machine's init (which ends every process of its pid
// namespace) and waits for nspawn.
func (m *machine) stop(exited chan error) {
	if m.pid1 != 0 {
		_ = syscall.Kill(m.pid1, syscall.SIGKILL)
	}
	// nspawn's exit status after its machine was killed says nothing.
	select {
	case err := <-exited:
		_ = err
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		err := <-exited
		m.t.Logf("systemd-nspawn killed after 10 s: %v", err)
	}
}

// unmount unmounts dir, retrying while the machine's last processes let
// go of it, lazily in the end.
func (m *machine) unmount(dir string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := syscall.Unmount(dir, 0)
		if err == nil || errors.Is(err, syscall.EINVAL) {
			return
		}
		if time.Now().After(deadline) {
			m.t.Errorf("unmount %s: %v; detaching it", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// write writes a file into the machine.
func (m *machine) write(path, content string) {
	m.t.Helper()
	full := filepath.Join(m.root, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		m.t.Fatal(err)
	}
}

// run runs a shell command inside the machine (every namespace of its
// init), bounded by ctx, and returns its combined output.
func (m *machine) run(ctx context.Context, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(m.pid1), "-a",
		"env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"sh", "-ec", script)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must runs script and fails the test if it fails.
func (m *machine) must(ctx context.Context, script string) string {
	m.t.Helper()
	out, err := m.run(ctx, script)
	if err != nil {
		m.t.Fatalf("in the machine: %s: %v\n%s", script, err, out)
	}
	return out
}

// poll runs script until it succeeds or within runs out.
func (m *machine) poll(ctx context.Context, within time.Duration, what, script string) (string, time.Duration) {
	m.t.Helper()
	start := time.Now()
	for {
		out, err := m.run(ctx, script)
		if err == nil {
			return out, time.Since(start)
		}
		if time.Since(start) > within || ctx.Err() != nil {
			m.t.Fatalf("%s: not within %v (test context: %v): %s: %v\n%s", what, within, ctx.Err(), script, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// docsBlock is the first ```sh block after heading in docs/operations.md,
// as commands for a root shell (sudo dropped).
func docsBlock(t *testing.T, heading string) []string {
	t.Helper()
	f, err := os.Open("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		lines   []string
		found   bool
		inBlock bool
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !found:
			found = line == heading
		case !inBlock && line == "```sh":
			inBlock = true
		case inBlock && line == "```":
			return joinContinued(lines)
		case inBlock:
			lines = append(lines, strings.TrimPrefix(line, "sudo "))
		}
	}
	t.Fatalf("docs/operations.md: no sh block after %q", heading)
	return nil
}

func joinContinued(lines []string) []string {
	var out []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
		}
		out = append(out, l)
	}
	return out
}

// copyTree copies the regular files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The vswitchd of the machine runs on OVS's dummy datapath (no kernel
// module in a container): a drop-in of the test's own replaces the
// packaged unit's ExecStart (ovs-ctl, which loads the kernel module) by the
// same daemon with --enable-dummy=override. Everything else of the packaged
// unit, and flowstate's drop-in, apply as on a node.
const dummyDropIn = `[Service]
ExecStart=
ExecStart=/usr/sbin/ovs-vswitchd unix:/var/run/openvswitch/db.sock --enable-dummy=override -vconsole:off -vsyslog:err -vfile:info --no-chdir --log-file=/var/log/openvswitch/ovs-vswitchd.log --pidfile=/var/run/openvswitch/ovs-vswitchd.pid --detach
`

var testFlows = []string{
	"table=0,priority=100,ip,nw_dst=10.0.0.1,actions=output:1",
	"table=0,priority=90,arp,actions=NORMAL",
	"table=1,priority=10,actions=drop",
}

// TestSystemdUnits installs deploy/systemd as docs/operations.md says
// inside a machine booted by a real systemd, then restarts vswitchd
// (gated and restored), freezes flowstated (the guard releases the node
// within its grace), kills it (systemd restarts it, the store restores),
// and kills the guard (systemd restarts it, flowstated proves it again).
func TestSystemdUnits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it mounts an overlay of / and boots it with systemd-nspawn (CI runs make test as root)")
	}
	src := filepath.Join(t.TempDir(), "flowstate")
	copyTree(t, binaries(t), filepath.Join(src, "bin"))
	copyTree(t, ".", filepath.Join(src, "deploy"))
	// The machine's part: about 20 s.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	testStart := time.Now()
	m := bootMachine(ctx, t, func(root string) {
		// A node of its own: a fresh OVS database and no flowstate state,
		// whatever this host holds.
		for _, p := range []string{"etc/openvswitch/conf.db", "var/lib/flowstate", "etc/systemd/system/flowstated.service",
			"etc/systemd/system/flowstate-guard.service", "etc/systemd/system/ovs-vswitchd.service.d"} {
			if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
				t.Fatal(err)
			}
		}
		copyTree(t, src, filepath.Join(root, "root/flowstate"))
	})
	defer func() {
		if t.Failed() {
			out, _ := m.run(context.Background(), "journalctl --no-pager -n 80 -u flowstated -u flowstate-guard -u ovs-vswitchd -u ovsdb-server")
			t.Logf("the machine's journal:\n%s", out)
		}
	}()

	// OVS as on a node: running, with br-int, before flowstate comes.
	m.write("/etc/systemd/system/ovs-vswitchd.service.d/90-test-dummy.conf", dummyDropIn)
	m.must(ctx, "systemctl daemon-reload && systemctl start ovs-vswitchd && ovs-vsctl add-br br-int -- set bridge br-int fail_mode=secure")

	// The install, as the docs give it.
	var install []string
	for _, l := range append(docsBlock(t, "### Binaries"), docsBlock(t, "### systemd")...) {
		if !strings.HasPrefix(l, "make ") {
			install = append(install, l)
		}
	}
	t.Logf("install, from docs/operations.md:\n  %s", strings.Join(install, "\n  "))
	out := m.must(ctx, "cd /root/flowstate\n"+strings.Join(install, "\n"))
	if !regexp.MustCompile(`guard: external, proven`).MatchString(out) {
		t.Errorf("flowctl status after the install does not show a proven external guard:\n%s", out)
	}
	m.must(ctx, "flowctl add-flows --module test - <<'EOF'\n"+strings.Join(testFlows, "\n")+"\nEOF\nflowctl --timeout 20s wait")
	onSwitch := func() string {
		return m.must(ctx, "ovs-ofctl -O OpenFlow15 --no-stats dump-flows br-int")
	}
	checkFlows := func(when string) {
		t.Helper()
		got := onSwitch()
		for _, want := range []string{"nw_dst=10.0.0.1", "arp", "table=1"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: br-int lacks the flow with %s:\n%s", when, want, got)
			}
		}
	}
	checkFlows("after the declare")
	since := func(t0 time.Time) string { return "@" + strconv.FormatInt(t0.Unix(), 10) }

	t.Run("restart ovs-vswitchd", func(t *testing.T) {
		t0 := time.Now().Add(-time.Second)
		m.must(ctx, "systemctl restart ovs-vswitchd")
		_, took := m.poll(ctx, 20*time.Second, "vswitchd released after the restart",
			"flowctl --timeout 2s wait --released --since "+t0.UTC().Format(time.RFC3339))
		t.Logf("released %v after the restart returned", took.Round(time.Millisecond))
		checkFlows("after systemctl restart ovs-vswitchd")
		// Armed by the drop-in's prestart before vswitchd started, then
		// cleared by flowstated once br-int was restored.
		pre := m.must(ctx, "journalctl --no-pager -o cat -u ovs-vswitchd --since "+since(t0))
		if !strings.Contains(pre, "flow-restore-wait armed") && !strings.Contains(pre, "flow-restore-wait was armed already") {
			t.Errorf("the drop-in's flowctl prestart did not arm the flag:\n%s", pre)
		}
		fs := m.must(ctx, "journalctl --no-pager -o cat -u flowstated --since "+since(t0))
		if !strings.Contains(fs, "flow-restore-wait cleared") {
			t.Errorf("flowstated did not clear the flag after the restore:\n%s", fs)
		}
	})

	t.Run("frozen flowstated", func(t *testing.T) {
		// The flag is armed for the next vswitchd start (re-arm); a
		// frozen flowstated must not keep it so beyond the guard's grace.
		m.poll(ctx, 10*time.Second, "flag re-armed", `test "$(ovs-vsctl get Open_vSwitch . other_config:flow-restore-wait)" = '"true"'`)
		m.must(ctx, "systemctl kill -s SIGSTOP flowstated")
		_, took := m.poll(ctx, 16*time.Second, "the guard releases the node of a frozen flowstated",
			`test "$(ovs-vsctl get Open_vSwitch . other_config:flow-restore-wait 2>/dev/null || echo none)" != '"true"'`)
		t.Logf("frozen flowstated: the guard released the node %v after SIGSTOP (grace 10s)", took.Round(time.Millisecond))
		if took > 13*time.Second {
			t.Errorf("released after %v, more than the 10s grace and a few heartbeats", took)
		}
		m.must(ctx, "systemctl kill -s SIGCONT flowstated")
		m.must(ctx, "flowctl --timeout 20s wait")
		checkFlows("after the frozen flowstated went on")
	})

	t.Run("killed flowstated", func(t *testing.T) {
		before := strings.TrimSpace(m.must(ctx, "systemctl show -P MainPID flowstated"))
		m.must(ctx, "systemctl kill -s SIGKILL flowstated")
		_, took := m.poll(ctx, 20*time.Second, "systemd restarts flowstated",
			`pid=$(systemctl show -P MainPID flowstated); test "$pid" != 0 && test "$pid" != `+before+` && systemctl is-active --quiet flowstated`)
		t.Logf("killed flowstated: active again %v later (RestartSec=2s)", took.Round(time.Millisecond))
		m.must(ctx, "flowctl --timeout 20s wait")
		if got := m.must(ctx, "flowctl dump-flows --module test"); strings.Count(got, "actions=") != len(testFlows) {
			t.Errorf("the restarted flowstated holds:\n%s\nwant the %d declared flows", got, len(testFlows))
		}
		checkFlows("after systemd restarted the killed flowstated")
	})

	t.Run("guard unit", func(t *testing.T) {
		m.must(ctx, "systemctl is-active flowstate-guard")
		// The DaemonSet's guard probe, against the guard unit: ready
		// while it runs, not once it is frozen.
		m.must(ctx, "flowstated guard probe")
		m.must(ctx, "systemctl kill -s SIGSTOP flowstate-guard")
		out, took := m.poll(ctx, 10*time.Second, "the probe fails for a frozen guard", "! flowstated guard probe 2>&1")
		if !strings.Contains(out, "made no OVSDB round trip") {
			t.Errorf("the probe of a frozen guard says %q", out)
		}
		t.Logf("guard probe: fails %v after the guard froze: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
		m.must(ctx, "systemctl kill -s SIGCONT flowstate-guard")
		m.poll(ctx, 10*time.Second, "the probe passes again", "flowstated guard probe")
		before := strings.TrimSpace(m.must(ctx, "systemctl show -P MainPID flowstate-guard"))
		m.must(ctx, "systemctl kill -s SIGKILL flowstate-guard")
		m.poll(ctx, 20*time.Second, "systemd restarts the guard and flowstated proves it again",
			`pid=$(systemctl show -P MainPID flowstate-guard); test "$pid" != 0 && test "$pid" != `+before+` && flowctl --timeout 2s status | grep -q "guard: external, proven (pid $pid"`)
		// Through it all flowstated's unit stayed up, and the guard is
		// its own unit: stopping flowstated leaves it running.
		m.must(ctx, "systemctl stop flowstated && systemctl is-active flowstate-guard && systemctl start flowstated && flowctl --timeout 20s wait")
	})
	t.Run("support-bundle", func(t *testing.T) {
		// On a systemd node the bundle holds the units' journals.
		out := m.must(ctx, "cd /root && flowctl support-bundle --events-wait 11s b.tar.gz && tar -tzf b.tar.gz && "+
			"tar -xzOf b.tar.gz --wildcards '*/journal-flowstated.txt' | grep -c 'msg=serving' && "+
			"tar -xzOf b.tar.gz --wildcards '*/journal-flowstate-guard.txt' | grep -c 'guard active'")
		for _, want := range []string{"/status.json", "/metrics.txt", "/events.jsonl", "/store.txt", "/journal-ovs-vswitchd.txt"} {
			if !strings.Contains(out, want) {
				t.Errorf("the bundle lacks %s:\n%s", want, out)
			}
		}
	})
	t.Logf("whole test %v", time.Since(testStart).Round(time.Millisecond))
}
