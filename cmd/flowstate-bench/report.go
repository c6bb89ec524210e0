package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// busyOthers is the average share of one CPU that other processes may use
// before the report warns that its figures are not representative.
const busyOthers = 0.2

// none fills a cell that has no figure by design (not one that failed).
const none = "—"

// row is one line of the table.
type row struct {
	figure   string
	fs, of   string // the two sides' figures
	ratio    string
	mem      string // flowstated's peaks
	cpu      string // flowstated (+ its client) / ovs-ofctl (+ ovs-vsctl)
	vswitchd string // vswitchd's CPU under flowstate / under ovs-ofctl
}

// timed is a row comparing two series on the figure f picks.
func timed(name string, s series, f func(sample) time.Duration, rate int, client string) row {
	fs, of := durations(s.fs, f), durations(s.of, f)
	r := row{figure: name, fs: fmtSamples(fs), of: fmtSamples(of), ratio: fmtRatio(fs, of),
		mem: fmtMem(s.fs), cpu: fmtCPU(s, client), vswitchd: fmtMedian(durations(s.fs, vswitchdOf)) + " / " +
			fmtMedian(durations(s.of, vswitchdOf))}
	if rate > 0 {
		r.fs += ", " + fmtRate(rate, fs)
		r.of += ", " + fmtRate(rate, of)
	}
	if n, at := stopped(s.fs); n > 0 {
		r.fs = fmt.Sprintf("> %s (stopped at -declare-timeout in %d of %d runs)", fmtDur(at), n, len(s.fs))
		if m := median(of); m > 0 {
			r.ratio = fmt.Sprintf("> %.0f×", at.Seconds()/m.Seconds())
		}
	}
	return r
}

// alone is a row of flowstate's figure alone: there is no ovs-ofctl side.
func alone(name string, ss []sample, rate int, client string) row {
	fs := durations(ss, wallOf)
	return row{figure: name, fs: fmtSamples(fs) + ", " + fmtRate(rate, fs), of: none, ratio: none, mem: fmtMem(ss),
		cpu:      fmtMedian(durations(ss, flowstatedOf)) + " + " + fmtMedian(durations(ss, driverOf)) + " " + client,
		vswitchd: none}
}

// stopped counts the samples stopped at -declare-timeout and returns the
// shortest of their times, a lower bound of every run's.
func stopped(ss []sample) (n int, at time.Duration) {
	for _, s := range ss {
		if s.stopped {
			if n == 0 || s.wall < at {
				at = s.wall
			}
			n++
		}
	}
	return n, at
}

// fmtMem is the highest VmHWM and RssAnon peak of the runs.
func fmtMem(ss []sample) string {
	var hwm, anon uint64
	for _, s := range ss {
		if s.mem.hwm == 0 {
			return "n/a"
		}
		hwm, anon = max(hwm, s.mem.hwm), max(anon, s.mem.anonPeak)
	}
	return fmtMiB(hwm) + " / " + fmtMiB(anon)
}

// fmtCPU is flowstated's median CPU, its client's if it drove the
// operation, and ovs-ofctl's.
func fmtCPU(s series, client string) string {
	out := fmtMedian(durations(s.fs, flowstatedOf))
	if client != "" {
		out += " + " + fmtMedian(durations(s.fs, driverOf)) + " " + client
	}
	return out + " / " + fmtMedian(durations(s.of, driverOf))
}

// rows is the table of one flow count.
func rows(r *result, o options) []row {
	idle := make([]uint64, 0, len(r.idle))
	idleRSS := make([]uint64, 0, len(r.idle))
	for _, st := range r.idle {
		idle, idleRSS = append(idle, st.anon), append(idleRSS, st.rss)
	}
	return []row{
		timed("restore, flowstated running: until forwarding resumes", r.restore, forwardingOf, 0, ""),
		timed("restore, flowstated running: until the flag is cleared and acknowledged", r.restore, wallOf, 0, ""),
		timed("start-up with the flows stored, full replay into a held, empty vswitchd: until the flag is cleared and acknowledged",
			r.startup, wallOf, 0, ""),
		{figure: "start-up: until the API serves", fs: fmtSamples(r.serving), of: none, ratio: none, mem: none, cpu: none, vswitchd: none},
		timed("declare: `flowctl add-flows` of the file, one command", r.declareFlowctl, wallOf, r.flows, "flowctl"),
		timed(fmt.Sprintf("declare: Go client, %d writers, Puts of %d encoded flows", o.writers, o.batch),
			r.declareClient, wallOf, r.flows, "client"),
		alone("declare with vswitchd down (stored only): `flowctl add-flows` of the file", r.offFlowctl, r.flows, "flowctl"),
		alone(fmt.Sprintf("declare with vswitchd down (stored only): Go client, %d writers, Puts of %d", o.writers, o.batch),
			r.offClient, r.flows, "client"),
		timed("no-op reconcile", r.noop, wallOf, 0, ""),
		timed("replace-flows: `flowctl replace-flows` of half the flows (one Sync, the other half removed)", r.sync, wallOf, 0, "flowctl"),
		{figure: fmt.Sprintf("idle, %s after the start-up replay: RssAnon (VmRSS)", fmtDur(idleWait)),
			fs: fmtMiB(medianBytes(idle)) + " (" + fmtMiB(medianBytes(idleRSS)) + ")", of: none, ratio: none, mem: none, cpu: none, vswitchd: none},
	}
}

func medianBytes(v []uint64) uint64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// report prints the markdown report: the machine, one table, and what the
// table's figures leave out.
func report(w io.Writer, cmdline string, m machine, o options, rs []*result, elapsed time.Duration) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("```sh")
	p("%s", cmdline)
	p("```")
	p("")
	runs := fmt.Sprintf("%d runs", o.runs)
	if o.runs == 1 {
		runs = "1 run"
	}
	p("%d CPUs (%s), %s, %s, %s; %s per figure; %s in all, %s,",
		m.cpus, m.cpu, m.kernel, m.ovs, m.goVer, runs, elapsed.Round(time.Second), m.started.UTC().Format("2006-01-02 15:04 MST"))
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
		p("**Other processes were busy during this run: the figures, ratios included, are noisy.**")
	}
	p("")
	p("| flows | figure | flowstate | ovs-ofctl | flowstate / ovs-ofctl | flowstated peak VmHWM / RssAnon | CPU: flowstated / ovs-ofctl | vswitchd CPU under flowstate / ovs-ofctl |")
	p("|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		for _, x := range rows(r, o) {
			p("| %s | %s |", fmtCount(r.flows), strings.Join([]string{x.figure, x.fs, x.of, x.ratio, x.mem, x.cpu, x.vswitchd}, " | "))
		}
	}
	p("")
	p("Median (min–max) of the runs; the ratio is flowstate's median over ovs-ofctl's, with the range of the")
	p("per-run ratios (each run measures both sides back to back). Below 1: flowstate is faster. Memory is the")
	p("highest of the runs (RssAnon sampled every %s); CPU and vswitchd CPU are medians (10 ms resolution).", fmtDur(memInterval))
	p("The ovs-ofctl side of both restores is `ovs-ofctl --bundle replace-flows` + `ovs-vsctl remove Open_vSwitch .")
	p("other_config flow-restore-wait` into a freshly restarted vswitchd; of both declares, one `ovs-ofctl --bundle")
	p("add-flows` into the empty bridge. Every restore leaves the same `dump-flows` on both sides, as does the first")
	p("declare run.")
	for _, r := range rs {
		p("")
		p("%s flows: store %s (%d B/flow); flowctl max RSS %s; restore with flowstated running: replay %s,",
			fmtCount(r.flows), fmtMiB(uint64(r.dbSize)), r.dbSize/int64(max(1, r.flows)), fmtMiB(maxBytes(r.flowctlMaxRSS)),
			fmtSamples(r.replay))
		p("flag clear + acknowledgement %s (as flowstated reports them).", fmtSamples(r.flagAck))
	}
}

func maxBytes(v []uint64) uint64 {
	var m uint64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
