package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where the figures were taken.
type machine struct {
	cpus    int
	cpu     string
	kernel  string
	ovs     string
	goVer   string
	started time.Time
	// load is /proc/loadavg's 1-minute figure at the start: other work on
	// the machine shows in the figures.
	load string
	// other is the CPU time other processes used during the run, steal
	// the time the hypervisor took; otherOK says they were measured.
	other, steal time.Duration
	otherOK      bool
}

func describeMachine(ctx context.Context) (machine, error) {
	m := machine{cpus: runtime.NumCPU(), goVer: runtime.Version(), started: time.Now()}
	m.cpu = cpuModel()
	m.load = loadAvg()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = "Linux " + strings.TrimSpace(string(b))
	} else {
		m.kernel = runtime.GOOS
	}
	bin, err := exec.LookPath("ovs-vswitchd")
	if err != nil {
		bin = "/usr/sbin/ovs-vswitchd"
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return m, fmt.Errorf("ovs-vswitchd --version: %w (install Open vSwitch: apt-get update && apt-get install -y openvswitch-switch)", err)
	}
	m.ovs, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	return m, nil
}

// loadAvg is the 1-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
