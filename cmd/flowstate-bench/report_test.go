package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseProcStatus(t *testing.T) {
	st, err := parseProcStatus([]byte("Name:\tflowstated\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t   512 kB\nRssFile:\t 512 kB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if st.hwm != 2048<<10 || st.rss != 1024<<10 || st.anon != 512<<10 {
		t.Fatalf("parseProcStatus = %+v", st)
	}
	if _, err := parseProcStatus([]byte("Name:\tx\nVmHWM:\t1 kB\n")); err == nil {
		t.Error("parseProcStatus accepted a status without RssAnon")
	}
	if _, err := parseProcStatus([]byte("VmHWM:\tmany kB\nVmRSS:\t1 kB\nRssAnon:\t1 kB\n")); err == nil {
		t.Error("parseProcStatus accepted a bad number")
	}
}

func TestParseMonitorLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want openVswitchRow
		ok   bool
	}{
		{"initial, held", `{"data":[["u","initial",3,3,["map",[["flow-restore-wait","true"]]]]],"headings":["row","action","cur_cfg","next_cfg","other_config"]}`,
			openVswitchRow{curCfg: 3, nextCfg: 3, held: true}, true},
		{"cleared, not yet applied", `{"data":[["u","old",null,3,["map",[["flow-restore-wait","true"]]]],["","new",3,4,["map",[]]]],"headings":[]}`,
			openVswitchRow{curCfg: 3, nextCfg: 4}, true},
		{"flag false is not held", `{"data":[["u","initial",1,1,["map",[["flow-restore-wait","false"]]]]],"headings":[]}`,
			openVswitchRow{curCfg: 1, nextCfg: 1}, true},
		{"old only", `{"data":[["u","old",0,null,null]],"headings":[]}`, openVswitchRow{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row, ok, err := parseMonitorLine([]byte(tc.line))
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.ok || (ok && row != tc.want) {
				t.Fatalf("parseMonitorLine = %+v, %v; want %+v, %v", row, ok, tc.want, tc.ok)
			}
		})
	}
	for _, bad := range []string{`not json`, `{"data":[["u","new",1]]}`, `{"data":[["u","new",1,1,["set",[]]]]}`} {
		if _, _, err := parseMonitorLine([]byte(bad)); err == nil {
			t.Errorf("parseMonitorLine(%s) succeeded", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{fmtCount(200000), "200k"},
		{fmtCount(1000000), "1M"},
		{fmtCount(1500), "1500"},
		{fmtRate(200000, []time.Duration{2 * time.Second}), "100k flows/s"},
		{fmtRate(3000000, []time.Duration{time.Second}), "3.00M flows/s"},
		{fmtMiB(300 << 20), "300 MiB"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestReport formats a result with made-up samples: one table, a row per
// figure, and the machine line.
func TestReport(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	s := func(wall, fwd int) sample {
		return sample{wall: ms(wall), forwarding: ms(fwd), flowstated: ms(wall / 2), driver: ms(wall / 4), vswitchd: ms(wall / 3),
			mem: memSample{hwm: 200 << 20, anonPeak: 100 << 20}}
	}
	of := func(wall int) sample {
		return sample{wall: ms(wall), forwarding: ms(wall), flowstated: -1, driver: ms(wall / 2), vswitchd: ms(wall / 3)}
	}
	pair := func(a, b int) series {
		return series{fs: []sample{s(a, a-1), s(a+10, a+9)}, of: []sample{of(b), of(b + 10)}}
	}
	r := &result{flows: 200000, restore: pair(1000, 2000), startup: pair(1500, 2000), declareFlowctl: pair(3000, 2000),
		declareClient: pair(1800, 2000), noop: pair(300, 1500), sync: pair(900, 1200), serving: []time.Duration{ms(50), ms(60)},
		replay: []time.Duration{ms(900), ms(950)}, flagAck: []time.Duration{ms(20), ms(22)},
		idle: []procStatus{{rss: 80 << 20, anon: 40 << 20}, {rss: 82 << 20, anon: 42 << 20}}, flowctlMaxRSS: []uint64{90 << 20},
		offFlowctl: []sample{s(1200, 0), s(1300, 0)}, offClient: []sample{s(800, 0), s(900, 0)},
		dbSize: 80 << 20}
	o := options{runs: 2, batch: 1000, writers: 8}
	var b bytes.Buffer
	report(&b, "flowstate-bench -runs 2", machine{cpus: 2, cpu: "cpu", kernel: "Linux", ovs: "ovs 3", goVer: "go", load: "1.0",
		other: 10 * time.Second, otherOK: true}, o, []*result{r}, 20*time.Second)
	out := b.String()
	checkReport(t, out, 200000, []string{
		"| 200k | restore, flowstated running: until forwarding resumes | 1.00 s (999 ms–1.01 s) | 2.00 s (2.00 s–2.01 s) | **0.50×** (0.50–0.50) | 200 MiB / 100 MiB |",
		"| 200k | declare: `flowctl add-flows` of the file, one command | 3.00 s (3.00 s–3.01 s), 67k flows/s | 2.00 s (2.00 s–2.01 s), 100k flows/s | **1.50×**",
		"1.50 s + 751 ms flowctl / 1.00 s |",
		"| 200k | replace-flows: `flowctl replace-flows` of half the flows (one Sync, the other half removed) | 905 ms (900 ms–910 ms) | 1.21 s (1.20 s–1.21 s) | **0.75×**",
		"| 200k | declare: Go client, 8 writers, Puts of 1000 encoded flows |",
		"| 200k | declare with vswitchd down (stored only): `flowctl add-flows` of the file | 1.25 s (1.20 s–1.30 s), 160k flows/s | — | — | 200 MiB / 100 MiB | 625 ms + 312 ms flowctl | — |",
		"| 200k | declare with vswitchd down (stored only): Go client, 8 writers, Puts of 1000 | 850 ms (800 ms–900 ms), 235k flows/s | — |",
		"| 200k | start-up: until the API serves | 55.0 ms (50.0 ms–60.0 ms) | — |",
		"| 200k | idle, 2.00 s after the start-up replay: RssAnon (VmRSS) | 42 MiB (82 MiB) | — |",
		"**Other processes were busy during this run",
		"2 runs per figure",
		"200k flows: store 80 MiB (419 B/flow); flowctl max RSS 90 MiB",
	})
}

// checkReport checks that the report holds every wanted string, one table,
// and the eleven rows of the flow count.
func checkReport(t *testing.T, report string, flows int, wants []string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if n := strings.Count(report, "\n| "+fmtCount(flows)+" |"); n != 11 {
		t.Errorf("report has %d rows for %d flows, want 11:\n%s", n, flows, report)
	}
	if n := strings.Count(report, "\n|---:|"); n != 1 {
		t.Errorf("report has %d tables, want 1:\n%s", n, report)
	}
}

func TestReportStopped(t *testing.T) {
	s := series{fs: []sample{{wall: 5 * time.Minute, stopped: true, flowstated: time.Minute, driver: time.Second}},
		of: []sample{{wall: 10 * time.Second, driver: time.Second}}}
	r := timed("declare", s, wallOf, 1000000, "flowctl")
	if want := "> 300.0 s (stopped at -declare-timeout in 1 of 1 runs)"; r.fs != want {
		t.Errorf("fs = %q, want %q", r.fs, want)
	}
	if want := "> 30×"; r.ratio != want {
		t.Errorf("ratio = %q, want %q", r.ratio, want)
	}
}
