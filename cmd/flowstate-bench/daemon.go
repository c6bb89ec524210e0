package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// daemonStopTimeout bounds a graceful stop of flowstated (SIGTERM) before it
// is killed; its own --shutdown-timeout is shorter.
const daemonStopTimeout = 30 * time.Second

// daemon is one flowstated process started by the benchmark, and a client
// connected to it. It owns the goroutine that waits for the process; stop
// ends both.
type daemon struct {
	cmd     *exec.Cmd
	started time.Time // just before exec
	serving time.Time // when its API socket first accepted
	c       *client.Client
	done    chan struct{} // closed once the process exited
	waitErr error         // set before done is closed
}

// startDaemon execs flowstated with args, its output appended to logPath,
// and returns once its API socket at sock accepts connections, with a client
// connected to it.
func startDaemon(ctx context.Context, bin string, args []string, logPath, sock string) (*daemon, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("flowstated log: %w", err)
	}
	defer logFile.Close() // the child holds its own copy
	// Not CommandContext: a cancelled run stops flowstated through stop,
	// gracefully, like everything else the deferred cleanups stop.
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start flowstated: %w", err)
	}
	go func() {
		defer close(d.done)
		d.waitErr = cmd.Wait()
	}()
	if err := d.waitServing(ctx, sock); err != nil {
		return nil, errors.Join(err, d.stop())
	}
	if d.c, err = client.New("unix://" + sock); err != nil {
		return nil, errors.Join(fmt.Errorf("connect to flowstated: %w", err), d.stop())
	}
	return d, nil
}

// waitServing polls the socket every few ms: gRPC's own dial backoff would
// add up to a second to a start-up that is measured.
func (d *daemon) waitServing(ctx context.Context, sock string) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	var dialer net.Dialer
	for {
		conn, err := dialer.DialContext(ctx, "unix", sock)
		if err == nil {
			d.serving = time.Now()
			return conn.Close()
		}
		select {
		case <-d.done:
			return fmt.Errorf("flowstated exited before serving: %w (see its log)", d.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("waiting for flowstated's socket %s: %w", sock, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop closes the client, sends SIGTERM and waits for a clean exit (a CPU
// profile is written then), killing flowstated after daemonStopTimeout.
func (d *daemon) stop() error {
	var err error
	if d.c != nil {
		if cerr := d.c.Close(); cerr != nil {
			err = fmt.Errorf("close client: %w", cerr)
		}
		d.c = nil
	}
	if serr := d.cmd.Process.Signal(syscall.SIGTERM); serr != nil && !errors.Is(serr, os.ErrProcessDone) {
		err = errors.Join(err, fmt.Errorf("stop flowstated: %w", serr))
	}
	select {
	case <-d.done:
	case <-time.After(daemonStopTimeout):
		_ = d.cmd.Process.Kill()
		<-d.done
		return errors.Join(err, fmt.Errorf("flowstated did not stop within %v: killed", daemonStopTimeout))
	}
	if d.waitErr != nil {
		err = errors.Join(err, fmt.Errorf("flowstated exited with: %w (see its log)", d.waitErr))
	}
	return err
}

// kill ends a flowstated that is busy with an abandoned request: a graceful
// stop would wait for it.
func (d *daemon) kill() {
	if d.c != nil {
		_ = d.c.Close()
		d.c = nil
	}
	_ = d.cmd.Process.Kill()
	<-d.done
}
