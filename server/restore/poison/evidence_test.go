package poison

import (
	"context"
	"log/slog"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestLogCause reads what OVS 3.1 logs (the abort line is CrashingLearn's,
// as vswitchd wrote it in the sandbox; the monitor's lines are
// daemon-unix.c's): a crash counts, a kill from outside does not, silence
// (an unmonitored SIGKILL, or a segfault) is unknown.
func TestLogCause(t *testing.T) {
	for _, tc := range []struct {
		log  string
		want deathCause
	}{
		{"2026-12-06T19:55:25.829Z|00043|rconn|WARN|br0<->unix#1: connection dropped (Connection reset by peer)\n" +
			"2026-12-06T19:55:25.830Z|00044|util|EMER|../lib/ofp-actions.c:9349: assertion len > 0 && len <= UINT16_MAX failed in ofpact_finish()\n", causeCrash},
		{"2026-12-06T19:55:24.724Z|00042|connmgr|INFO|br0: added service controller \"punix:/tmp/x/br0.mgmt\"\n", causeUnknown},
		{"2026-12-06T19:56:00.000Z|00002|daemon_unix(monitor)|INFO|pid 4242 died, killed (Killed), exiting\n", causeKilled},
		{"2026-12-06T19:56:00.000Z|00002|daemon_unix(monitor)|ERR|pid 4242 died, killed (Segmentation fault), core dumped, restarting\n", causeCrash},
		{"2026-12-06T19:56:00.000Z|00002|daemon_unix(monitor)|ERR|pid 4242 died, killed (Aborted), restarting\n", causeCrash},
		{"2026-12-06T19:56:00.000Z|00050|fatal_signal|WARN|terminating with signal 15 (Terminated)\n", causeKilled},
		{"", causeUnknown},
	} {
		if got, why := logCause(tc.log); got != tc.want {
			t.Errorf("%q: %v (%s), want %v", tc.log, got, why, tc.want)
		}
	}
}

// TestProcExits: the proc connector reports a SIGKILL as a kill from
// outside and an abort as a crash; without the privilege to listen, it
// reports nothing (and a death then counts).
func TestProcExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var p procExits
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx, testLogger(t)) }()
	defer func() { cancel(); <-done }()
	// Listening, or given up.
	for ctx.Err() == nil {
		p.mu.Lock()
		l := p.listening
		p.mu.Unlock()
		if l {
			break
		}
		select {
		case <-done:
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		want deathCause
	}{{syscall.SIGKILL, causeKilled}, {syscall.SIGABRT, causeCrash}, {syscall.SIGSEGV, causeCrash}} {
		c := exec.CommandContext(ctx, "sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		_ = c.Process.Signal(tc.sig)
		_ = c.Wait()
		ws, ok := p.wait(ctx, c.Process.Pid, 2*time.Second)
		if !ok {
			p.mu.Lock()
			l := p.listening
			p.mu.Unlock()
			if l {
				t.Fatalf("listening, yet the exit of pid %d by %v went unheard", c.Process.Pid, tc.sig)
			}
			t.Logf("proc connector unavailable here (not root in the host's namespaces): exits unheard")
			return
		}
		if got, why := statusCause(ws); got != tc.want {
			t.Fatalf("%v: %v (%s), want %v", tc.sig, got, why, tc.want)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
