package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// progressMin is the input size, in lines, from which flowctl draws a
// progress bar: smaller files are done before one would be read.
const progressMin = 10000

// progress draws a one-line bar for a long input, only when w is a terminal
// (so logs and pipes never get control characters). A nil *progress is a
// valid no-op, so callers need no checks.
type progress struct {
	w           io.Writer
	label       string
	total, last int
	drawn       time.Time
}

// newProgress returns a bar for total steps, or nil when total is small or
// w is not a terminal.
func newProgress(w io.Writer, label string, total int) *progress {
	if total < progressMin || !isTerminal(w) {
		return nil
	}
	return &progress{w: w, label: label, total: total, last: -1}
}

// isTerminal reports whether w is a terminal, as golang.org/x/term does on
// Linux (an ioctl that only a tty answers).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

const barWidth = 30

// set shows n steps done; it redraws at most every 100 ms and when the
// percentage changes.
func (p *progress) set(n int) {
	if p == nil {
		return
	}
	pct := n * 100 / p.total
	if pct == p.last || (time.Since(p.drawn) < 100*time.Millisecond && n < p.total) {
		return
	}
	p.last, p.drawn = pct, time.Now()
	fill := n * barWidth / p.total
	fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% %d/%d", p.label, strings.Repeat("=", fill), strings.Repeat(" ", barWidth-fill), pct, n, p.total)
}

// done erases the bar.
func (p *progress) done() {
	if p == nil || p.last < 0 {
		return
	}
	fmt.Fprint(p.w, "\r\033[K")
}
