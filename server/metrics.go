package server

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/internal/version"
	"github.com/flowstate-io/flowstate/server/guard"
	"github.com/flowstate-io/flowstate/server/restore"
	"github.com/flowstate-io/flowstate/server/restore/gate"
	"github.com/flowstate-io/flowstate/store"
)

// stateCollector exports the engine's state as gauges, read at scrape time,
// so every series exists from the first scrape for every managed bridge and
// required module, whatever has happened yet.
type stateCollector struct {
	engine gaugedState
	flag   restore.Flag
	keep   *keeper
	store  *store.Store
	log    *slog.Logger
}

// gaugedState is the engine's state the collector exports.
type gaugedState interface {
	Gate() gate.Status
	Modules() (map[string]restore.ModuleState, error)
}

var (
	descFlag = prometheus.NewDesc("flowstate_flow_restore_wait",
		"other_config:flow-restore-wait as stored in OVSDB: 1 armed, 0 cleared (0 while OVSDB is not connected).", nil, nil)
	descAck = prometheus.NewDesc("flowstate_vswitchd_acknowledged",
		"1 when ovs-vswitchd has read the latest OVSDB change (cur_cfg reached next_cfg).", nil, nil)
	descOVSDB = prometheus.NewDesc("flowstate_ovsdb_connected",
		"1 while the OVSDB connection is up.", nil, nil)
	descGate = prometheus.NewDesc("flowstate_gate",
		"The cold-start gate: 1 for its current state (open, waiting, timed_out), 0 for the others.", []string{"state"}, nil)
	descModule = prometheus.NewDesc("flowstate_module_ready",
		"1 when the module has marked itself ready for this boot; every required module and every module that ever marked itself ready.",
		[]string{"module", "required"}, nil)
	descEntries = prometheus.NewDesc("flowstate_desired_entries",
		"Desired entries in the store.", []string{"bridge", "module", "kind"}, nil)
	descGuard = prometheus.NewDesc("flowstate_guard_running",
		"1 while a guard holds the lease lock (always 1 with --guard=off).", nil, nil)
	descGuardProven = prometheus.NewDesc("flowstate_guard_proven",
		"1 while the guard's heartbeat proves it would release the node (fresh, flowstated's OVSDB, a grace no longer than flowstated's); flow-restore-wait is armed only then (always 1 with --guard=off).", nil, nil)
	descGuardUnproven = prometheus.NewDesc("flowstate_guard_unproven",
		"1 for the field that fails the guard's proof (running, heartbeat, ovsdb, writable, grace), 0 for the others.", []string{"field"}, nil)
	descWedged = prometheus.NewDesc("flowstate_engine_wedged",
		"1 while an operation on the switch has run longer than --wedge-after.", nil, nil)
	descBuild = prometheus.NewDesc("flowstate_build_info",
		"Build of the running flowstated; always 1.", []string{"version", "revision", "go_version"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFlag, descAck, descOVSDB, descGate, descModule, descEntries, descGuard, descGuardProven, descGuardUnproven, descWedged, descBuild} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v bool, labels ...string) {
		f := 0.0
		if v {
			f = 1
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, f, labels...)
	}
	fl := c.flag.State()
	gauge(descFlag, fl.On)
	gauge(descOVSDB, fl.Connected)
	gauge(descAck, fl.Acknowledged)
	g := c.engine.Gate()
	gauge(descGate, g.Open && !g.TimedOut, "open")
	gauge(descGate, !g.Open, "waiting")
	gauge(descGate, g.TimedOut, "timed_out")
	gauge(descGuard, c.keep.cfg.Mode == GuardOff || c.keep.present.Load())
	proven, _ := c.keep.guardPresent()
	gauge(descGuardProven, proven)
	failing := ""
	if p := c.keep.proof.Load(); p.err != nil && c.keep.cfg.Mode != GuardOff {
		failing = p.err.Field
	}
	for _, f := range guard.Fields() {
		gauge(descGuardUnproven, f == failing, f)
	}
	gauge(descWedged, c.keep.wedgedReason() != "")
	bi := version.Get()
	revision := bi.Commit
	if revision == "" {
		revision = "unknown"
	}
	gauge(descBuild, true, bi.Version, revision, bi.GoVersion)

	modules, err := c.engine.Modules()
	if err != nil {
		c.log.Warn("metrics: reading modules", "err", err)
	}
	for name, st := range modules {
		req := "false"
		if st.Required {
			req = "true"
		}
		gauge(descModule, st.Ready, name, req)
	}
	counts, err := c.store.Entries().Counts()
	if err != nil {
		c.log.Warn("metrics: counting entries", "err", err)
		return
	}
	for _, n := range counts {
		for kind, v := range map[string]int{"flow": n.Flows, "group": n.Groups, "meter": n.Meters} {
			ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(v), n.Bridge, n.Module, kind)
		}
	}
}
