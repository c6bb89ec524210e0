package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"time"

	"github.com/flowstate-io/flowstate/internal/sandbox"
)

// releaseMonitor watches the Open_vSwitch row through `ovsdb-client
// monitor`, a process of its own that neither side of a restore knows
// about, and records when forwarding resumed: the first moment, after the
// flag was seen set, that flow-restore-wait is gone and cur_cfg has caught
// up with next_cfg. Both flowstated and ovs-vsctl clear the flag in the
// transaction that bumps next_cfg, and vswitchd copies next_cfg to cur_cfg
// once it has applied that configuration, so this is when vswitchd stopped
// waiting, as seen by ovsdb-server's next client: the same observer for both
// sides. It owns the process and the goroutine reading it; close stops both.
type releaseMonitor struct {
	cmd      *exec.Cmd
	ready    chan struct{} // closed at the initial contents
	released chan time.Time
	done     chan struct{}
	err      error // set before done is closed
}

// startReleaseMonitor starts the monitor and returns once it has the
// initial contents of the row, so that no later update is missed.
func startReleaseMonitor(ctx context.Context, sb *sandbox.Sandbox) (*releaseMonitor, error) {
	bin, err := exec.LookPath("ovsdb-client")
	if err != nil {
		return nil, fmt.Errorf("ovsdb-client: %w (%s)", err, sandbox.InstallHint)
	}
	cmd := exec.Command(bin, "--format=json", "monitor", sb.DBAddr(), "Open_vSwitch", "Open_vSwitch",
		"cur_cfg,next_cfg,other_config")
	cmd.Env = sb.Env()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("ovsdb-client monitor: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ovsdb-client monitor: %w", err)
	}
	m := &releaseMonitor{cmd: cmd, ready: make(chan struct{}), released: make(chan time.Time, 1), done: make(chan struct{})}
	go m.read(out)
	select {
	case <-m.ready:
		return m, nil
	case <-m.done:
		return nil, fmt.Errorf("ovsdb-client monitor ended: %w", errors.Join(m.err, m.cmd.Wait()))
	case <-ctx.Done():
		m.close()
		return nil, fmt.Errorf("ovsdb-client monitor: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		m.close()
		return nil, errors.New("ovsdb-client monitor: no initial contents in 30 s")
	}
}

// monitorUpdate is one line of `ovsdb-client --format=json monitor`.
type monitorUpdate struct {
	Data [][]json.RawMessage `json:"data"`
}

// openVswitchRow is the monitored state of the row.
type openVswitchRow struct {
	curCfg, nextCfg int64
	held            bool
}

func (m *releaseMonitor) read(r io.Reader) {
	defer close(m.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	first, seenHeld, sent := true, false, false
	for sc.Scan() {
		now := time.Now()
		row, ok, err := parseMonitorLine(sc.Bytes())
		if err != nil {
			m.err = err
			return
		}
		if first {
			first = false
			close(m.ready)
		}
		if !ok {
			continue
		}
		seenHeld = seenHeld || row.held
		if seenHeld && !row.held && row.curCfg >= row.nextCfg && !sent {
			m.released <- now
			sent = true
		}
	}
	m.err = sc.Err()
}

// parseMonitorLine returns the row's new state; ok is false when the line
// holds no new state (an update of another column of no interest).
func parseMonitorLine(line []byte) (row openVswitchRow, ok bool, err error) {
	var u monitorUpdate
	if err := json.Unmarshal(line, &u); err != nil {
		return row, false, fmt.Errorf("ovsdb-client monitor: %q: %w", line, err)
	}
	for _, d := range u.Data {
		// row, action, cur_cfg, next_cfg, other_config
		if len(d) != 5 {
			return row, false, fmt.Errorf("ovsdb-client monitor: %q: want 5 columns", line)
		}
		var action string
		if err := json.Unmarshal(d[1], &action); err != nil {
			return row, false, fmt.Errorf("ovsdb-client monitor: action: %w", err)
		}
		if action != "initial" && action != "new" {
			continue
		}
		var other []json.RawMessage // ["map", [[k, v], ...]]
		if err := errors.Join(json.Unmarshal(d[2], &row.curCfg), json.Unmarshal(d[3], &row.nextCfg),
			json.Unmarshal(d[4], &other)); err != nil {
			return row, false, fmt.Errorf("ovsdb-client monitor: %q: %w", line, err)
		}
		if len(other) != 2 || string(other[0]) != `"map"` {
			return row, false, fmt.Errorf("ovsdb-client monitor: other_config %s: want a map", d[4])
		}
		var pairs [][2]string
		if err := json.Unmarshal(other[1], &pairs); err != nil {
			return row, false, fmt.Errorf("ovsdb-client monitor: other_config %s: %w", d[4], err)
		}
		row.held = false
		for _, p := range pairs {
			row.held = row.held || (p[0] == "flow-restore-wait" && p[1] == "true")
		}
		ok = true
	}
	return row, ok, nil
}

// wait returns when forwarding resumed.
func (m *releaseMonitor) wait(ctx context.Context) (time.Time, error) {
	select {
	case t := <-m.released:
		return t, nil
	case <-m.done:
		select {
		case t := <-m.released:
			return t, nil
		default:
		}
		return time.Time{}, fmt.Errorf("ovsdb-client monitor ended before the flag was released: %w", m.err)
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("waiting for vswitchd to apply the cleared flag: %w", ctx.Err())
	}
}

// close stops ovsdb-client and waits for it and the reader. What either
// says then is of no interest: it was killed.
func (m *releaseMonitor) close() {
	_ = m.cmd.Process.Kill()
	<-m.done
	_ = m.cmd.Wait()
}
