package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
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

// median of the samples (the mean of the middle two for an even count).
func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratios are the per-run ratios a[i]/b[i] of paired samples.
func ratios(a, b []time.Duration) []float64 {
	out := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, float64(a[i])/float64(b[i]))
		}
	}
	return out
}

// fmtDur prints a duration with three significant digits in ms or s.
func fmtDur(d time.Duration) string {
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
}

// fmtMedian is the median, or "n/a" without samples.
func fmtMedian(d []time.Duration) string {
	if len(d) == 0 {
		return "n/a"
	}
	return fmtDur(median(d))
}

// fmtSamples is "median (min–max)", or just the value for one sample.
func fmtSamples(d []time.Duration) string {
	if len(d) == 1 {
		return fmtDur(d[0])
	}
	return fmt.Sprintf("%s (%s–%s)", fmtDur(median(d)), fmtDur(slices.Min(d)), fmtDur(slices.Max(d)))
}

// fmtRatio is the ratio of the medians, with the range of the per-run
// ratios.
func fmtRatio(a, b []time.Duration) string {
	mb := median(b)
	if mb == 0 {
		return "n/a"
	}
	r := float64(median(a)) / float64(mb)
	rs := ratios(a, b)
	if len(rs) < 2 {
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("**%.2f×** (%.2f–%.2f)", r, slices.Min(rs), slices.Max(rs))
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// busyOthers is the average share of one CPU that other processes may use
// before the report warns that its figures are not representative.
const busyOthers = 0.2

// report prints the markdown report.
func report(w io.Writer, cmdline string, m machine, o options, rs []*result, elapsed time.Duration) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("```sh")
	p("%s", cmdline)
	p("```")
	p("")
	p("%d CPUs (%s), %s, %s, %s; %d runs per measurement, Puts of %d flows; %s in all, %s,",
		m.cpus, m.cpu, m.kernel, m.ovs, m.goVer, o.runs, o.batch, elapsed.Round(time.Second), m.started.UTC().Format("2006-01-02"))
	switch {
	case !m.otherOK:
	case m.other < 100*time.Millisecond:
		p("other processes used no measurable CPU during the run, the hypervisor stole %s;", fmtDur(m.steal))
	default:
		p("other processes used %s of CPU during the run (%.0f%% of one CPU on average), the hypervisor stole %s;",
			fmtDur(m.other), 100*m.other.Seconds()/elapsed.Seconds(), fmtDur(m.steal))
	}
	p("load average (1 min) %s at the start and %s at the end.", m.load, loadAvg())
	if m.otherOK && m.other.Seconds() > busyOthers*elapsed.Seconds() {
		p("")
		p("**Other processes were busy during this run: the figures, ratios included, are not representative.**")
	}
	p("")
	p("Median (min–max) of the runs; the ratio is flowstate's median over ovs-ofctl's, with the range of the")
	p("per-run ratios (each run measures both back to back). Below 1: flowstate is faster.")
	p("")
	p("| flows | measurement | flowstate | ovs-ofctl | flowstate / ovs-ofctl |")
	p("|---:|---|---:|---:|---:|")
	for _, r := range rs {
		p("| %d | restore after restart (until flag cleared) | %s | %s | %s |", r.flows,
			fmtSamples(walls(r.restore.fs)), fmtSamples(walls(r.restore.of)), fmtRatio(walls(r.restore.fs), walls(r.restore.of)))
		p("| %d | declare on a live bridge | %s | %s | %s |", r.flows,
			fmtSamples(walls(r.declare.fs)), fmtSamples(walls(r.declare.of)), fmtRatio(walls(r.declare.fs), walls(r.declare.of)))
		p("| %d | no-op reconcile | %s | %s | %s |", r.flows,
			fmtSamples(walls(r.noop.fs)), fmtSamples(walls(r.noop.of)), fmtRatio(walls(r.noop.fs), walls(r.noop.of)))
	}
	p("")
	p("- restore: flowstate = vswitchd's management socket accepting → flowstated's `flag_cleared` event")
	p("  (published after vswitchd acknowledged the clear); ovs-ofctl = `ovs-ofctl --bundle replace-flows` +")
	p("  `ovs-vsctl remove Open_vSwitch . other_config flow-restore-wait`. Both leave identical `dump-flows`.")
	p("- declare: Puts of %d flows (each one bundle and one fsynced bbolt transaction) vs one", o.batch)
	p("  `ovs-ofctl --bundle add-flows` of the whole file (nothing stored).")
	p("- no-op reconcile: `Reconcile` RPC (dump, diff, nothing sent) vs `ovs-ofctl --bundle replace-flows` of the")
	p("  file on a bridge that already holds it.")
	p("")
	p("Restore, flowstate side (medians): where the time goes, as flowstated reports it. \"replay starts\" is")
	p("when its replay_started event arrived, after the management socket accepted (the sandbox polls the socket")
	p("every few ms, so flowstated's own redial may win and make it negative).")
	p("")
	p("| flows | total | replay starts | replay (store read, dump, diff, bundle) | flag clear + ack | rest (redial, event delivery) | bundle messages | bundle bytes |")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		total, replay, ack := median(walls(r.restore.fs)), median(r.replay), median(r.flagAck)
		p("| %d | %s | %s | %s | %s | %s | %d | %s |", r.flows, fmtDur(total), fmtDur(median(r.replayStart)),
			fmtSamples(r.replay), fmtSamples(r.flagAck),
			fmtDur(max(0, total-replay-ack)), r.replayMessages, fmtBytes(r.replayBytes))
	}
	p("")
	p("CPU time over the same intervals (medians): flowstate's is this process's (flowstated and its gRPC client),")
	p("ovs-ofctl's is its own plus ovs-vsctl's; vswitchd's is read from /proc at 10 ms resolution. vswitchd's CPU is")
	p("the floor neither side can go below.")
	p("")
	p("| flows | measurement | flowstate CPU | vswitchd CPU under flowstate | ovs-ofctl CPU | vswitchd CPU under ovs-ofctl |")
	p("|---:|---|---:|---:|---:|---:|")
	for _, r := range rs {
		for _, m := range []struct {
			name string
			s    series
		}{{"restore", r.restore}, {"declare", r.declare}, {"no-op reconcile", r.noop}} {
			p("| %d | %s | %s | %s | %s | %s |", r.flows, m.name, fmtMedian(cpus(m.s.fs)), fmtMedian(vswitchdCPUs(m.s.fs)),
				fmtMedian(cpus(m.s.of)), fmtMedian(vswitchdCPUs(m.s.of)))
		}
	}
	p("")
	p("Memory and storage (flowstated runs inside the benchmark process, so this is the Go heap, not RSS).")
	p("")
	p("| flows | heap in use after restore | after GC | before flowstated (the benchmark's own flow text) | allocated during the restore | bbolt file | one Status RPC |")
	p("|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		p("| %d | %s | %s | %s | %s (%d B/flow) | %s | %s |", r.flows, fmtBytes(r.heapAfterRestore), fmtBytes(r.heapLive),
			fmtBytes(r.heapBefore), fmtBytes(r.restoreAlloc), r.restoreAlloc/uint64(max(1, r.flows)),
			fmtBytes(uint64(r.dbSize)), fmtDur(r.status))
	}
}
