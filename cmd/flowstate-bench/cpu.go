package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sample is one timed operation. A CPU figure that could not be read is -1.
type sample struct {
	wall time.Duration
	// forwarding is, for a restore, the time until vswitchd acknowledged
	// the cleared flag (and so forwards again), as an OVSDB monitor saw it.
	forwarding time.Duration
	// flowstated is flowstated's CPU over the interval (-1: not running).
	flowstated time.Duration
	// driver is the CPU of what drove the operation: the ovs-ofctl and
	// ovs-vsctl children, flowctl, or this process's Go client (-1: none).
	driver   time.Duration
	vswitchd time.Duration
	// mem is flowstated's memory over the interval (zero: not running).
	mem memSample
	// stopped says the operation was stopped at -declare-timeout: wall is
	// a lower bound.
	stopped bool
}

// driverKind says whose CPU a meter counts as the driver's.
type driverKind int

const (
	driverNone     driverKind = iota
	driverChildren            // waited-for children: ovs-ofctl, ovs-vsctl, flowctl
	driverSelf                // this process: the Go client
)

// meter measures one operation: the wall clock from begin to stop, the CPU
// of flowstated, of the driver and of vswitchd over the same interval, and
// flowstated's memory.
type meter struct {
	start      time.Time
	driver     driverKind
	driverCPU0 time.Duration
	fsPID      int
	fsCPU0     time.Duration
	mem        *memSampler
	vsPID      int
	vsCPU0     time.Duration
}

// newMeter starts counting the driver's CPU; the clock starts at begin.
func newMeter(driver driverKind) *meter {
	m := &meter{driver: driver, driverCPU0: -1}
	switch driver {
	case driverChildren:
		m.driverCPU0 = rusage(true)
	case driverSelf:
		m.driverCPU0 = rusage(false)
	case driverNone:
	}
	m.start = time.Now()
	return m
}

// flowstated starts measuring the flowstated process pid: its CPU from now
// and its memory (VmHWM reset) or, for a process started in the interval
// (fresh), from its start.
func (m *meter) flowstated(pid int, fresh bool) error {
	s, err := startMemSampler(pid, !fresh)
	if err != nil {
		return err
	}
	m.fsPID, m.mem = pid, s
	if !fresh {
		m.fsCPU0 = procCPU(pid)
	}
	return nil
}

// vswitchd starts counting vswitchd's CPU.
func (m *meter) vswitchd(pid int) {
	m.vsPID, m.vsCPU0 = pid, procCPU(pid)
}

// begin restarts the clock: what happened before (a vswitchd restart) is
// left out of the wall time, not out of the CPU and memory figures.
func (m *meter) begin() { m.start = time.Now() }

// stop ends the interval now; it stops the memory sampler, so every meter
// that measured flowstated must be stopped (or abandoned through abort).
func (m *meter) stop() sample {
	s := sample{wall: time.Since(m.start), flowstated: -1, driver: -1, vswitchd: -1}
	switch m.driver {
	case driverChildren:
		s.driver = diff(rusage(true), m.driverCPU0)
	case driverSelf:
		s.driver = diff(rusage(false), m.driverCPU0)
	case driverNone:
	}
	if m.fsPID > 0 {
		s.flowstated = diff(procCPU(m.fsPID), m.fsCPU0)
		s.mem = m.mem.finish()
		m.fsPID, m.mem = 0, nil
	}
	if m.vsPID > 0 {
		s.vswitchd = diff(procCPU(m.vsPID), m.vsCPU0)
	}
	return s
}

// abort stops the memory sampler of a meter whose interval failed.
func (m *meter) abort() {
	if m.mem != nil {
		m.mem.finish()
		m.mem = nil
	}
}

// diff is b-a, or -1 when either is unknown.
func diff(b, a time.Duration) time.Duration {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

// rusage is the user+system CPU of this process or of its terminated,
// waited-for children; -1 if unknown.
func rusage(children bool) time.Duration {
	who := syscall.RUSAGE_SELF
	if children {
		who = syscall.RUSAGE_CHILDREN
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat times; it is
// 100 on every Linux ABI.
const clockTick = 10 * time.Millisecond

// procCPU is the user+system CPU of a running process from /proc/PID/stat,
// at 10 ms resolution; -1 if unknown.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces; fields after it start at
	// field 3 (state). utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * clockTick
}

// series are the paired samples of one measurement, index i of both taken
// back to back.
type series struct {
	fs, of []sample
}

func (s *series) add(fs, of sample) {
	s.fs, s.of = append(s.fs, fs), append(s.of, of)
}

// durations returns f of every sample, or nil if any is unknown (negative).
func durations(ss []sample, f func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(ss))
	for _, s := range ss {
		v := f(s)
		if v < 0 {
			return nil
		}
		out = append(out, v)
	}
	return out
}

func wallOf(s sample) time.Duration       { return s.wall }
func forwardingOf(s sample) time.Duration { return s.forwarding }
func flowstatedOf(s sample) time.Duration { return s.flowstated }
func driverOf(s sample) time.Duration     { return s.driver }
func vswitchdOf(s sample) time.Duration   { return s.vswitchd }

// machineCPU is the busy and stolen CPU time of the whole machine from
// /proc/stat, and this process's CPU plus its waited-for children's, at
// one instant: the difference of two readings shows how much CPU other
// processes took while the benchmark ran.
type machineCPU struct {
	busy, steal, ours time.Duration
	ok                bool
}

func readMachineCPU() machineCPU {
	m := machineCPU{}
	self, children := rusage(false), rusage(true)
	b, err := os.ReadFile("/proc/stat")
	if err != nil || self < 0 || children < 0 {
		return m
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return m
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return m
		}
	}
	m.busy = time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * clockTick
	m.steal = time.Duration(v[7]) * clockTick
	m.ours = self + children
	m.ok = true
	return m
}

// others is the CPU time the rest of the machine used between two readings
// (never negative: the readings have 10 ms resolution), and the stolen time.
func others(from, to machineCPU) (other, steal time.Duration, ok bool) {
	if !from.ok || !to.ok {
		return 0, 0, false
	}
	other = max(0, (to.busy-from.busy)-(to.ours-from.ours))
	return other, to.steal - from.steal, true
}
