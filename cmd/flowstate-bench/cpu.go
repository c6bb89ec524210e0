package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sample is one timed operation: its wall time, the CPU time of the side
// that drove it (this process for flowstate: flowstated and its client; the
// ovs-ofctl and ovs-vsctl children for the baseline) and vswitchd's CPU time
// over the same interval. A CPU figure that could not be read is -1.
type sample struct {
	wall, cpu, vswitchd time.Duration
}

// meter measures one operation from its creation to stop.
type meter struct {
	start    time.Time
	children bool // count the CPU of waited-for children instead of our own
	cpu      time.Duration
	pid      int
	vswitchd time.Duration
}

// startMeter starts measuring; vswitchd is the pid of vswitchd (0: none).
func startMeter(children bool, vswitchd int) meter {
	m := meter{children: children, pid: vswitchd}
	m.cpu = rusage(children)
	m.vswitchd = procCPU(vswitchd)
	m.start = time.Now()
	return m
}

// stop returns the sample; wall ends now.
func (m meter) stop() sample {
	wall := time.Since(m.start)
	s := sample{wall: wall, cpu: -1, vswitchd: -1}
	if c := rusage(m.children); c >= 0 && m.cpu >= 0 {
		s.cpu = c - m.cpu
	}
	if v := procCPU(m.pid); v >= 0 && m.vswitchd >= 0 {
		s.vswitchd = v - m.vswitchd
	}
	return s
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

// pair is one run of a measurement: flowstate's sample and ovs-ofctl's.
type pair struct {
	fs, of sample
}

func (s *series) add(p pair) {
	s.fs, s.of = append(s.fs, p.fs), append(s.of, p.of)
}

func walls(ss []sample) []time.Duration {
	return pick(ss, func(s sample) time.Duration { return s.wall })
}
func cpus(ss []sample) []time.Duration {
	return pick(ss, func(s sample) time.Duration { return s.cpu })
}
func vswitchdCPUs(ss []sample) []time.Duration {
	return pick(ss, func(s sample) time.Duration { return s.vswitchd })
}

// pick returns f of every sample, or nil if any is unknown (negative).
func pick(ss []sample, f func(sample) time.Duration) []time.Duration {
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
