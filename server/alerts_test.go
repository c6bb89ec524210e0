package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/server"
)

// alertRules is the rules file operators load (docs/operations.md, Alerts).
const alertRules = "../deploy/prometheus/flowstate-alerts.yaml"

// notExercised are the rules no state of TestAlertRules drives to firing,
// and why; a rule neither exercised nor listed here fails the test.
var notExercised = map[string]string{
	// It fires when replays keep failing on a connected bridge, and the
	// engine is built so that they do not: refusals are quarantined, and a
	// switch that stops answering is disconnected. What remains (the store
	// failing to read, a dump OVS answers with an error) cannot be caused
	// on cue against the sandbox.
	"FlowstateReplayFailing": "no state makes replays fail on a connected bridge",
}

// scrape is one scrape of /metrics: the flowstate_ samples, series as
// exposed (name{labels}) to value; nil when the scrape failed (up 0).
type scrape map[string]string

// TestAlertRules evaluates the rules of deploy/prometheus with promtool
// against scrapes of a real flowstated on a sandbox: healthy, none fires;
// in each faulty state exactly the alerts that name the fault fire. Each
// state is a pair of scrapes, before and after the fault, laid out as
// Prometheus would have stored them (scrapes every minute: the first from
// 0 to 30m, then the second) and evaluated at 39m: a fault that has lasted
// longer than every rule's `for` (5m at most), and a counter increase
// within every increase() window of 10m or more. Every scrape must be
// promlint-clean, and every rule must fire in some state (or be listed in
// notExercised).
func TestAlertRules(t *testing.T) {
	promtool := promtoolPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rules, err := filepath.Abs(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	exercised := map[string]bool{}
	// check runs one state through promtool: want are the firing alerts as
	// label matchers of `count by (alertname, bridge, module) (ALERTS)`.
	check := func(name string, before, after scrape, want ...string) {
		t.Helper()
		for _, w := range want {
			exercised[regexp.MustCompile(`alertname="(\w+)"`).FindStringSubmatch(w)[1]] = true
		}
		t.Run(name, func(t *testing.T) { evalRules(ctx, t, promtool, rules, before, after, want) })
	}

	// br-ref is not managed: flowstated mirrors it, and it has a
	// flowstate_bridge_connected series too, which the rules leave alone.
	e := testenv.New(ctx, t, testenv.Bridges("br-int", "br-ref"), testenv.Configure(func(c *server.Config) {
		c.MetricsListen = "127.0.0.1:0"
		// Guard off (the zero value) and re-arm: the flag stays armed
		// between restarts, as a deployment with a running guard keeps it.
		c.RearmFlowRestoreWait = true
		c.AuditInterval = 200 * time.Millisecond
		c.WedgeAfter = time.Second
		// A frozen vswitchd stays connected for this test's wedge: the
		// fault is a stuck operation, not a dead peer.
		c.EchoInterval, c.EchoTimeout = time.Second, time.Minute
	}))
	e.Start(ctx)
	pipeline := []client.Entry{
		client.FlowText("table=0,priority=100,ip,actions=resubmit(,1)"),
		client.FlowText("table=0,priority=90,arp,actions=normal"),
		client.FlowText("table=1,priority=90,ip,actions=normal"),
	}
	if _, err := e.Client.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, pipeline...); err != nil {
		t.Fatal(err)
	}
	healthy := func() scrape {
		t.Helper()
		e.WaitConverged(ctx)
		return scrapeUntil(ctx, t, e, "healthy", map[string]string{
			`flowstate_desired_entries{bridge="br-int",kind="flow",module="pipeline"}`: "3",
		})
	}
	h := healthy()
	check("healthy", h, h)

	// vswitchd down with the flag armed: a vswitchd started now would be
	// held until flowstated reconnects.
	if err := e.Sandbox.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	down := scrapeUntil(ctx, t, e, "br-int and br-ref disconnected", map[string]string{
		`flowstate_bridge_connected{bridge="br-int"}`: "0", `flowstate_bridge_connected{bridge="br-ref"}`: "0",
	})
	check("vswitchd down, flag held", h, down,
		`alertname="FlowstateBridgeNotConnected",bridge="br-int"`,
		`alertname="FlowstateFlowRestoreWaitHeld"`)
	if err := e.Sandbox.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	h = healthy()

	// Drift: a flow deleted behind flowstate's back, found and corrected.
	if out, err := e.Sandbox.Ofctl(ctx, "--strict", "del-flows", "br-int", "table=1,priority=90,ip"); err != nil {
		t.Fatal(err, out)
	}
	e.WaitConverged(ctx)
	drifted := scrapeUntil(ctx, t, e, "drift corrected", map[string]string{`flowstate_drift_corrections_total{bridge="br-int"}`: "1"})
	check("drift corrected", h, drifted, `alertname="FlowstateDriftFound",bridge="br-int"`)
	h = drifted

	// Wedged: a replay stuck on a frozen vswitchd for longer than
	// WedgeAfter.
	if err := e.Sandbox.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	reconciled := make(chan error, 1)
	go func() { _, err := e.Client.Reconcile(ctx, "br-int"); reconciled <- err }()
	wedged := scrapeUntil(ctx, t, e, "engine wedged", map[string]string{`flowstate_engine_wedged`: "1"})
	if err := e.Sandbox.ThawVswitchd(); err != nil {
		t.Fatal(err)
	}
	if err := <-reconciled; err != nil {
		t.Fatalf("reconcile through the frozen switch, once thawed: %v", err)
	}
	check("engine wedged", h, wedged, `alertname="FlowstateEngineWedged"`)
	h = healthy()

	// A quarantined entry: table 7 takes one flow, the module declares two
	// while vswitchd is down, and the replay leaves the second out.
	if err := e.Sandbox.StopVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := e.Sandbox.Vsctl(ctx, "--no-wait", "--", "--id=@ft", "create", "Flow_Table", "flow_limit=1", "overflow_policy=refuse",
		"--", "set", "Bridge", "br-int", "flow_tables:7=@ft"); err != nil {
		t.Fatal(err, out)
	}
	table7 := []client.Entry{client.FlowText("table=7,priority=1,ip,actions=drop"), client.FlowText("table=7,priority=2,ip,actions=drop")}
	if _, err := e.Client.Put(ctx, client.Module{Bridge: "br-int", Name: "policy"}, table7...); err != nil {
		t.Fatal(err)
	}
	if err := e.Sandbox.StartVswitchd(ctx); err != nil {
		t.Fatal(err)
	}
	e.WaitConverged(ctx)
	quarantined := scrapeUntil(ctx, t, e, "one entry quarantined", map[string]string{`flowstate_quarantined_entries{bridge="br-int"}`: "1"})
	check("entry quarantined", h, quarantined, `alertname="FlowstateQuarantinedEntries",bridge="br-int"`)
	if _, err := e.Client.Sync(ctx, client.Module{Bridge: "br-int", Name: "policy"}, false); err != nil {
		t.Fatal(err)
	}
	scrapeUntil(ctx, t, e, "quarantine lifted", map[string]string{`flowstate_quarantined_entries{bridge="br-int"}`: "0"})
	h = healthy()

	// The host reboots (new boot id, vswitchd comes back gated), and the
	// gate waits for a module that never gets ready: first while it waits
	// (the flag held), then past the readiness timeout.
	e.Stop()
	if err := os.WriteFile(e.Config.BootIDFile, []byte("second-boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Sandbox.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.Config.RequiredModules, e.Config.ReadinessTimeout = []string{"pipeline", "pod"}, time.Hour
	e.Start(ctx)
	if _, err := e.Client.Sync(ctx, client.Module{Bridge: "br-int", Name: "pipeline"}, true, pipeline...); err != nil {
		t.Fatal(err)
	}
	waiting := scrapeUntil(ctx, t, e, "gate waiting for pod", map[string]string{
		`flowstate_gate{state="waiting"}`: "1", `flowstate_gate{state="open"}`: "0",
		`flowstate_module_ready{module="pipeline",required="true"}`: "1",
	})
	check("cold start, gate waiting", h, waiting,
		`alertname="FlowstateFlowRestoreWaitHeld"`,
		`alertname="FlowstateModuleNotReady",module="pod"`)
	// The timeout counts from the first start in this boot, so a restart
	// with a short one opens the gate at once.
	e.Stop()
	e.Config.ReadinessTimeout = time.Second
	e.Start(ctx)
	timedOut := scrapeUntil(ctx, t, e, "gate timed out", map[string]string{
		`flowstate_gate{state="timed_out"}`: "1", `flowstate_gate{state="open"}`: "0",
	})
	check("cold start, readiness timeout", h, timedOut,
		`alertname="FlowstateGateTimedOut"`,
		`alertname="FlowstateModuleNotReady",module="pod"`)

	// Back to a plain start (no required module), then a second managed
	// bridge that does not exist: released without it.
	e.Stop()
	e.Config.RequiredModules = nil
	e.Start(ctx)
	h = healthy()
	e.Stop()
	e.Config.Bridges = []string{"br-int", "br-gone"}
	e.Start(ctx)
	gone := scrapeUntil(ctx, t, e, "br-gone not restored", map[string]string{`flowstate_bridge_not_restored{bridge="br-gone"}`: "1"})
	check("managed bridge missing", h, gone, `alertname="FlowstateBridgeNotRestored",bridge="br-gone"`)

	// OVSDB unreachable (a wrong --ovsdb): the flag can be neither cleared
	// nor armed; the bridge itself connects.
	e.Stop()
	e.Config.Bridges = []string{"br-int"}
	ovsdb := e.Config.OVSDB
	e.Config.OVSDB = "unix:" + filepath.Join(e.Sandbox.Dir(), "none.sock")
	e.Start(ctx)
	noOVSDB := scrapeUntil(ctx, t, e, "OVSDB down, br-int connected", map[string]string{
		`flowstate_ovsdb_connected`: "0", `flowstate_flow_restore_wait`: "0",
		// Mirrors start from OVSDB's bridge list: no series for br-ref.
		`flowstate_bridge_connected{bridge="br-ref"}`: "",
	})
	check("OVSDB unreachable", h, noOVSDB, `alertname="FlowstateOVSDBDisconnected"`)
	e.Stop()
	e.Config.OVSDB = ovsdb

	// A bridge holding flows this store never declared: flowstated stands
	// aside rather than delete them.
	if err := e.Sandbox.AddBridge(ctx, "br-x"); err != nil {
		t.Fatal(err)
	}
	if out, err := e.Sandbox.Ofctl(ctx, "add-flow", "br-x", "priority=5,actions=drop"); err != nil {
		t.Fatal(err, out)
	}
	e.Config.Bridges = []string{"br-int", "br-x"}
	e.Start(ctx)
	aside := scrapeUntil(ctx, t, e, "standing aside from br-x", map[string]string{`flowstate_bridge_standing_aside{bridge="br-x"}`: "1"})
	check("bridge standing aside", h, aside, `alertname="FlowstateBridgeStandingAside",bridge="br-x"`)

	// No guard: with an external guard that does not run, the flag is
	// left disarmed.
	e.Stop()
	e.Config.Bridges = []string{"br-int"}
	e.Config.Guard = server.GuardConfig{Mode: server.GuardExternal, Lease: filepath.Join(e.Sandbox.Dir(), "lease"), Grace: time.Second,
		StartTimeout: 100 * time.Millisecond}
	e.Start(ctx)
	e.WaitConverged(ctx)
	noGuard := scrapeUntil(ctx, t, e, "no guard, flag disarmed", map[string]string{`flowstate_guard_running`: "0", `flowstate_flow_restore_wait`: "0"})
	check("no guard", h, noGuard, `alertname="FlowstateNoGuard"`)

	// flowstated gone: the scrape fails.
	e.Stop()
	check("flowstated down", noGuard, nil, `alertname="FlowstateDown"`)
	// No target at all (the scrape job lost it): no up series, only the
	// absent() rule can say so.
	check("no target", noGuard, noTarget, `alertname="FlowstateTargetMissing"`)

	text, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(text), -1) {
		if _, ok := notExercised[name[1]]; !exercised[name[1]] && !ok {
			t.Errorf("rule %s fires in no state of this test: add one, or list it in notExercised with the reason", name[1])
		}
	}
}

// promtoolPath finds Prometheus's promtool; without it the test fails,
// saying how to install it.
func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): install it with `apt-get install prometheus`, as scripts/install-deps.sh does", err)
	}
	return p
}

// settled is what a scrape of the test's flowstated shows once a state has
// settled, apart from the fault: waiting for the fault alone could catch a
// scrape taken before the rest caught up (OVSDB not connected yet, the
// flag not re-armed yet) and fire alerts the state does not have.
var settled = map[string]string{
	`flowstate_bridge_connected{bridge="br-int"}`: "1",
	`flowstate_bridge_connected{bridge="br-ref"}`: "1",
	`flowstate_ovsdb_connected`:                   "1",
	`flowstate_flow_restore_wait`:                 "1",
	`flowstate_gate{state="open"}`:                "1",
	`flowstate_guard_running`:                     "1",
	`flowstate_engine_wedged`:                     "0",
}

// scrapeUntil scrapes /metrics until every series of settled and fault has
// its value (fault's where both name it; "" for a series that must be
// absent), checking each scrape with promlint, and returns the last one.
func scrapeUntil(ctx context.Context, t *testing.T, e *testenv.Env, what string, fault map[string]string) scrape {
	t.Helper()
	want := maps.Clone(settled)
	maps.Copy(want, fault)
	var s scrape
	var mismatch string
	done := false
	defer func() {
		if !done && mismatch != "" {
			t.Logf("waiting for %s, the last scrape had %s", what, mismatch)
		}
	}()
	testenv.Poll(ctx, t, what, func() (bool, error) {
		body := e.Metrics(ctx)
		problems, err := promlint.New(strings.NewReader(body)).Lint()
		if err != nil {
			return false, fmt.Errorf("promlint: %w", err)
		}
		if len(problems) > 0 {
			return false, fmt.Errorf("promlint: %v", problems)
		}
		s = parseScrape(body)
		for series, v := range want {
			if s[series] != v {
				mismatch = fmt.Sprintf("%s %q, not %q", series, s[series], v)
				return false, nil
			}
		}
		return true, nil
	})
	done = true
	return s
}

// parseScrape keeps the flowstate_ samples of a text exposition: the alert
// rules read nothing else (up is added by evalRules, as Prometheus adds it).
func parseScrape(body string) scrape {
	s := scrape{}
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, "flowstate_") {
			continue
		}
		// client_golang writes no timestamps: the value is the last field.
		i := strings.LastIndexByte(l, ' ')
		s[l[:i]] = l[i+1:]
	}
	return s
}

// The target labels Prometheus would add to flowstated's series.
const targetLabels = `job="flowstate",instance="flowstated:9452"`

// evalRules runs `promtool test rules` on the rules with input series made
// of before (0m to 30m) and after (31m to 60m) and checks which alerts fire
// at 39m (a [10m] range then holds a sample of each, whether its start is
// closed, as in Prometheus 2, or open, as in 3). A nil scrape is a failed one: up 0 and no series.
func evalRules(ctx context.Context, t *testing.T, promtool, rules string, before, after scrape, want []string) {
	t.Helper()
	type inputSeries struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	// The values of a series: "V" repeated for 31 samples is "Vx30", a
	// missing sample "_"; a missing "_xN" is N samples.
	values := func(v string, ok bool, n int) string {
		if !ok {
			return fmt.Sprintf("_x%d", n)
		}
		return fmt.Sprintf("%sx%d", v, n-1)
	}
	up := func(s scrape, n int) string {
		switch {
		case s == nil:
			return fmt.Sprintf("0x%d", n)
		case isNoTarget(s):
			// Prometheus writes a staleness marker when service
			// discovery drops a target, then nothing.
			return fmt.Sprintf("stale _x%d", n)
		}
		return fmt.Sprintf("1x%d", n)
	}
	input := []inputSeries{{`up{` + targetLabels + `}`, up(before, 30) + " " + up(after, 29)}}
	if isNoTarget(after) {
		after = nil
	}
	var names []string
	for series := range before {
		names = append(names, series)
	}
	for series := range after {
		if _, ok := before[series]; !ok {
			names = append(names, series)
		}
	}
	slices.Sort(names)
	for _, series := range names {
		b, inBefore := before[series]
		a, inAfter := after[series]
		input = append(input, inputSeries{withTargetLabels(series), values(b, inBefore, 31) + " " + values(a, inAfter, 30)})
	}
	var exp []map[string]any
	for _, w := range want {
		exp = append(exp, map[string]any{"labels": "{" + w + "}", "value": 1})
	}
	test := map[string]any{
		"rule_files":          []string{rules},
		"evaluation_interval": "1m",
		"tests": []map[string]any{{
			"interval":     "1m",
			"input_series": input,
			"promql_expr_test": []map[string]any{{
				"expr":        `count by (alertname, bridge, module) (ALERTS{alertstate="firing"})`,
				"eval_time":   "39m",
				"exp_samples": exp,
			}},
		}},
	}
	b, err := json.MarshalIndent(test, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// promtool reads YAML, of which JSON is a subset.
	file := filepath.Join(t.TempDir(), "alerts_test.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\nwant firing: %q", err, out, want)
	}
}

// noTarget, as the scrape after a fault, is a target service discovery no
// longer finds: no sample at all, not even up.
var noTarget = scrape{noTargetKey: ""}

const noTargetKey = "\x00no target"

func isNoTarget(s scrape) bool { _, ok := s[noTargetKey]; return ok && len(s) == 1 }

// withTargetLabels adds targetLabels to an exposed series name{labels}.
func withTargetLabels(series string) string {
	name, labels, ok := strings.Cut(series, "{")
	if !ok {
		return name + "{" + targetLabels + "}"
	}
	return name + "{" + targetLabels + "," + labels
}
