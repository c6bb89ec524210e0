package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// proc is a long-lived child daemon (ovsdb-server or ovs-vswitchd). Its
// waiter goroutine is the only caller of cmd.Wait; it closes done when the
// process has exited and been reaped. The Sandbox owns every proc and Close
// waits for each done channel.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // result of cmd.Wait; read only after done is closed
}

// startProc starts path with args. Its stdout and stderr go to outPath: the
// daemons log to their own --log-file, but errors before the log file is
// open (bad flags, missing schema) only appear on stderr.
func startProc(log *slog.Logger, name, path string, args, env []string, outPath string) (*proc, error) {
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sandbox: open %s output: %w", name, err)
	}
	// The child gets its own copy of the descriptor; passing an *os.File
	// means exec starts no copying goroutines.
	defer out.Close()

	// Not CommandContext: the daemon must outlive the context of the call
	// that started it. Its lifetime is bounded by the Sandbox instead.
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sandbox: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	pid := cmd.Process.Pid
	log.Debug("process started", "name", name, "pid", pid)
	go func() {
		err := cmd.Wait()
		p.err = err
		log.Debug("process exited", "name", name, "pid", pid, "result", fmt.Sprint(err))
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process has already been reaped, so a signal
// never reaches a recycled pid.
func (p *proc) signal(sig os.Signal) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("sandbox: signal %s to %s (pid %d): %w", sig, p.name, p.pid(), err)
	}
	return nil
}

// waitExit blocks until the process has exited or ctx ends.
func (p *proc) waitExit(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox: waiting for %s (pid %d) to exit: %w", p.name, p.pid(), ctx.Err())
	}
}

// terminate asks the process to stop with SIGTERM and escalates to SIGKILL
// after grace. It is for Close, which has no context of its own.
func (p *proc) terminate(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	// A stopped process keeps SIGTERM pending until it runs again.
	_ = p.signal(sigCont)
	if err := p.signal(sigTerm); err != nil {
		return err
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	return p.kill(grace)
}

// kill sends SIGKILL and waits up to grace for the exit.
func (p *proc) kill(grace time.Duration) error {
	if err := p.signal(os.Kill); err != nil {
		return err
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("sandbox: %s (pid %d) survived SIGKILL for %s", p.name, p.pid(), grace)
	}
}

// pollInterval is how often readiness is re-checked. Dials are cheap, so a
// short interval keeps restarts in tests fast.
const pollInterval = 10 * time.Millisecond

// waitSocket polls until the unix socket at path accepts a connection. It
// fails early when p (if not nil) exits, since the socket will then never
// appear.
func waitSocket(ctx context.Context, path string, p *proc) error {
	var d net.Dialer
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var done <-chan struct{}
	if p != nil {
		done = p.done
	}
	for {
		dctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		c, err := d.DialContext(dctx, "unix", path)
		cancel()
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox: waiting for %s to accept: %w (last dial: %w)", path, ctx.Err(), err)
		case <-done:
			return fmt.Errorf("sandbox: %s exited (%w) before %s accepted", p.name, p.err, path)
		case <-tick.C:
		}
	}
}

// tailFile returns up to the last n lines of the file at path, for error
// messages. Missing files yield a note instead of an error.
func tailFile(path string, n int) string {
	const maxRead = 16 << 10
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	off := st.Size() - maxRead
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(string(bytes.TrimRight(buf, "\n")), "\n")
	if off > 0 && len(lines) > 0 {
		lines = lines[1:] // the first line is probably cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
