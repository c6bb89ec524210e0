package poison

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What killed vswitchd (step 1 of the package doc): only a death vswitchd caused
// itself is evidence that an entry crashes it. A signal from outside (an
// operator's kill -9, the OOM killer, a stray SIGTERM) is not.
//
// Two sources, either of which may be missing:
//
//   - the proc connector (CN_PROC, procexits_linux.go): the kernel reports
//     every process's exit with its wait status, so a SIGKILL reads as
//     such. It needs root (CAP_NET_ADMIN) in the host's pid and network
//     namespaces, and vswitchd's pid as flowstated sees it; and
//   - vswitchd's log file (NewEvidence), the lines written since the
//     replay began: an abort logs an EMER line (`assertion ... failed`), a
//     --monitor parent logs `pid N died, killed (Segmentation fault)` or
//     `killed (Killed)`, and vswitchd caught by SIGTERM, SIGINT or SIGHUP
//     logs `terminating with signal N`. An unmonitored vswitchd killed by
//     SIGKILL, or by a segfault, logs nothing: the log alone cannot tell
//     those apart.
//
// A crash in either source counts; a kill from outside in one and no crash
// in the other does not; otherwise (no evidence read) the death counts, as
// a real crash loop must be stopped, and the bisection never names an entry
// no dying probe sent (bisect.go).
type deathCause int

const (
	causeUnknown deathCause = iota
	causeCrash
	causeKilled
)

func (c deathCause) String() string {
	switch c {
	case causeCrash:
		return "crash"
	case causeKilled:
		return "killed from outside"
	}
	return "unknown"
}

// outsideSignals are the signals by which others end vswitchd: whoever
// sends them, they say nothing about what vswitchd was sent.
var outsideSignals = map[syscall.Signal]bool{syscall.SIGKILL: true, syscall.SIGTERM: true, syscall.SIGINT: true, syscall.SIGHUP: true}

// statusCause reads a wait status (as the proc connector reports it).
func statusCause(ws syscall.WaitStatus) (deathCause, string) {
	switch {
	case ws.Signaled() && outsideSignals[ws.Signal()]:
		return causeKilled, "exit by " + ws.Signal().String()
	case ws.Signaled():
		return causeCrash, "exit by " + ws.Signal().String()
	case ws.Exited():
		return causeCrash, "exit status " + strconv.Itoa(ws.ExitStatus())
	}
	return causeUnknown, ""
}

var (
	// monitorDied is what a --monitor parent logs when its child ends
	// (daemon-unix.c: "pid N died, killed (Killed), exiting").
	monitorDied = regexp.MustCompile(`died, killed \(([^)]*)\)`)
	// outsideNames are strsignal's names of outsideSignals.
	outsideNames = map[string]bool{"Killed": true, "Terminated": true, "Interrupt": true, "Hangup": true}
)

// logCause reads the lines vswitchd (and its monitor) logged since a replay
// began.
func logCause(text string) (deathCause, string) {
	killed := ""
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "|EMER|") || strings.Contains(line, "died, exit status") {
			return causeCrash, line
		}
		if m := monitorDied.FindStringSubmatch(line); m != nil {
			if !outsideNames[m[1]] {
				return causeCrash, line
			}
			killed = line
		}
		if strings.Contains(line, "terminating with signal") {
			killed = line
		}
	}
	if killed != "" {
		return causeKilled, killed
	}
	return causeUnknown, ""
}

// Evidence is what tells a crash of vswitchd from a kill from outside, for
// every bridge of an engine: the exits the proc connector reported, heard
// while Run runs, and vswitchd's log.
type Evidence struct {
	logFile string
	exits   procExits
}

// NewEvidence returns the evidence read from vswitchd's log file logFile
// ("" for none) and, once Run runs, the proc connector.
func NewEvidence(logFile string) *Evidence { return &Evidence{logFile: logFile} }

// Run listens to the proc connector until ctx ends; without the privilege
// to (root in the host's namespaces) it logs why and returns.
func (ev *Evidence) Run(ctx context.Context, log *slog.Logger) { ev.exits.run(ctx, log) }

// maxLogRead bounds what is read of vswitchd's log after a death.
const maxLogRead = 1 << 20

// logSize is the size of vswitchd's log, where the lines of a replay
// begin; -1 when it cannot be read.
func (ev *Evidence) logSize() int64 {
	if ev.logFile == "" {
		return -1
	}
	fi, err := os.Stat(ev.logFile)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// logSince returns what vswitchd's log holds from offset at (all of it if
// it was rotated since; at most maxLogRead bytes, the last ones).
func (ev *Evidence) logSince(at int64) (string, error) {
	f, err := os.Open(ev.logFile)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if fi.Size() < at {
		at = 0
	}
	at = max(at, fi.Size()-maxLogRead)
	b, err := io.ReadAll(io.NewSectionReader(f, at, fi.Size()-at))
	return string(b), err
}

// cause says what ended the vswitchd of w (pid as in its pidfile), and
// what said so.
func (ev *Evidence) cause(ctx context.Context, w Watch) (deathCause, string) {
	pid, _ := strconv.Atoi(strings.SplitN(w.vswitchd, "@", 2)[0])
	procCause, procWhy := causeUnknown, ""
	if ws, ok := ev.exits.wait(ctx, pid, time.Second); ok {
		procCause, procWhy = statusCause(ws)
		procWhy = "proc connector: " + procWhy
	}
	logc, logWhy := causeUnknown, ""
	if w.logAt >= 0 {
		if text, err := ev.logSince(w.logAt); err == nil {
			logc, logWhy = logCause(text)
			logWhy = fmt.Sprintf("%s: %s", ev.logFile, logWhy)
		}
	}
	switch {
	case procCause == causeCrash:
		return causeCrash, procWhy
	case logc == causeCrash:
		return causeCrash, logWhy
	case procCause == causeKilled:
		return causeKilled, procWhy
	case logc == causeKilled:
		return causeKilled, logWhy
	}
	return causeUnknown, "no evidence read (proc connector and vswitchd's log silent or unavailable)"
}

// vswitchdGone reports whether the vswitchd identified as before
// (Vswitchd.Identity) died: it exited, and not in order. An orderly stop
// (systemctl stop or restart, ovs-appctl exit) removes its pidfile; an
// abort (a failed assertion), a fatal signal or an OOM kill leaves it, until
// the next vswitchd replaces it. It waits at most two seconds for the
// process to be gone, as a dying vswitchd may still write its core.
func vswitchdGone(ctx context.Context, v Vswitchd, before string) bool {
	deadline := time.Now().Add(2 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for pidAlive(before) {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return v.Identity() != ""
}

// pidAlive reports whether the process of a vswitchd identity runs (and is
// not a zombie).
func pidAlive(ident string) bool {
	pidText, _, _ := strings.Cut(ident, "@")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	stat, err := os.ReadFile("/proc/" + pidText + "/stat")
	if err != nil {
		return !os.IsNotExist(err)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}
