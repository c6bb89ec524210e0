package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/flowstate-io/flowstate/entry"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return m, s
}

// TestProgress: parsing a large flow file draws a bar on a terminal, and
// nothing on a pipe or for a small file.
func TestProgress(t *testing.T) {
	var b strings.Builder
	for i := range progressMin + 1 {
		fmt.Fprintf(&b, "table=0,priority=%d,ip,nw_dst=10.%d.%d.%d,actions=drop\n", i%65536, i>>16&255, i>>8&255, i&255)
	}
	file := filepath.Join(t.TempDir(), "big.flows")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func(stderr io.Writer, name string) {
		t.Helper()
		cmd := &cobra.Command{}
		cmd.SetErr(stderr)
		cmd.SetIn(strings.NewReader("table=0,priority=1,actions=drop\n"))
		lines, err := readInput(cmd, name, entry.KindFlow)
		if err != nil || len(lines) == 0 {
			t.Fatalf("readInput %s: %d lines, %v", name, len(lines), err)
		}
	}

	var pipe bytes.Buffer
	read(&pipe, file)
	if pipe.Len() != 0 {
		t.Fatalf("a bar on a non-terminal: %q", pipe.String())
	}
	master, tty := openPTY(t)
	// Drain the terminal while writing to it: its buffer is small.
	got := make(chan []byte, 1)
	go func() {
		out, _ := io.ReadAll(master) // EIO once the slave is closed and drained
		got <- out
	}()
	read(tty, "-")
	read(tty, file)
	_ = tty.Close()
	s := string(<-got)
	if !strings.Contains(s, "parsing "+file+" [") || !strings.Contains(s, "100% 10001/10001") || !strings.HasSuffix(s, "\r\033[K") {
		t.Fatalf("terminal output %q", s)
	}
	if strings.Contains(s, "parsing -") {
		t.Fatalf("a bar for a one-line input: %q", s)
	}
}
