package restore

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/server/restore/flag"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// Metrics are the engine's Prometheus collectors.
type Metrics struct {
	connected         *prometheus.GaugeVec
	replays           *prometheus.CounterVec
	replayDuration    *prometheus.HistogramVec
	replayMessages    *prometheus.CounterVec
	drift             *prometheus.CounterVec
	quarantined       *prometheus.CounterVec
	quarantinedNow    *prometheus.GaugeVec
	readinessTimeouts prometheus.Counter
	writeRequests     *prometheus.CounterVec
	writeBatches      *prometheus.CounterVec
	stagedWrites      *prometheus.CounterVec
	standingAside     *prometheus.GaugeVec
	driftFound        *prometheus.CounterVec
	replayDeaths      *prometheus.CounterVec
	replayKills       *prometheus.CounterVec
	poisoned          *prometheus.GaugeVec
	survived          *prometheus.CounterVec
	suspects          *prometheus.GaugeVec
	// flag are the flag's (package flag).
	flag *flag.Metrics
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered, as in tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowstate_bridge_connected", Help: "1 while the OpenFlow connection to the bridge is up.",
		}, []string{"bridge"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_replays_total", Help: "Reconciliations of a bridge with its desired state, by result.",
		}, []string{"bridge", "result"}),
		replayDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "flowstate_replay_duration_seconds", Help: "Time from dump to bundle commit of a replay.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"bridge"}),
		replayMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_replay_messages_total", Help: "Messages sent in replay bundles, by operation.",
		}, []string{"bridge", "op"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_drift_corrections_total", Help: "Differences found and corrected by the periodic audit.",
		}, []string{"bridge"}),
		quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_entries_quarantined_total", Help: "Entries quarantined during a replay (refused by the switch, or predicted to be).",
		}, []string{"bridge"}),
		quarantinedNow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowstate_quarantined_entries", Help: "Entries currently left out of the bridge because the switch refuses them, or would.",
		}, []string{"bridge"}),
		readinessTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flowstate_readiness_timeouts_total", Help: "Cold starts where the readiness timeout expired before every required module was ready.",
		}),
		writeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_write_requests_total", Help: "Write requests (Put, Sync, Delete) by bridge and result: ok, an error kind (invalid_argument, failed_precondition, unavailable, ...), outcome_unknown or canceled.",
		}, []string{"bridge", "result"}),
		writeBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_write_batches_total", Help: "Store transactions run for write requests, one bundle each when the bridge is live; requests share them (group commit), and a batch with a failing request runs again without it.",
		}, []string{"bridge"}),
		stagedWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_staged_writes_total", Help: "Streamed writes past --stage-above entries, staged on disk and stored (applied or not); counted in flowstate_write_batches_total too.",
		}, []string{"bridge"}),
		standingAside: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowstate_bridge_standing_aside",
			Help: "1 while flowstated leaves the bridge alone because another store manages it, or it holds flows this store never declared (see the bridge's status).",
		}, []string{"bridge"}),
		driftFound: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_drift_found_total", Help: "Audits that found the switch different from the store (the bridge is unconverged until the replay that follows).",
		}, []string{"bridge"}),
		replayDeaths: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_vswitchd_replay_deaths_total", Help: "Deaths of ovs-vswitchd during or shortly after a replay (--survive-after); at the second in a window the suspects are held out and bisected.",
		}, []string{"bridge"}),
		replayKills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_vswitchd_replay_kills_total", Help: "Deaths of ovs-vswitchd during a replay that the evidence (proc connector, vswitchd's log) shows were a signal from outside (SIGKILL, SIGTERM, SIGINT, SIGHUP): not counted as crashes.",
		}, []string{"bridge"}),
		poisoned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowstate_poisoned_entry", Help: "1 for each entry found to crash ovs-vswitchd and quarantined, named by its ovs-ofctl text (at most 200 characters).",
		}, []string{"bridge", "module", "entry"}),
		survived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowstate_replays_survived_total", Help: "Replays that sent something and that ovs-vswitchd survived for --survive-after: its digest of the switch is kept.",
		}, []string{"bridge"}),
		suspects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowstate_crash_suspects", Help: "Entries held out of the bridge as suspects of crashing ovs-vswitchd, while they are bisected across restarts.",
		}, []string{"bridge"}),
		flag: flag.NewMetrics(),
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.replays, m.replayDuration, m.replayMessages,
			m.drift, m.quarantined, m.quarantinedNow, m.readinessTimeouts, m.writeRequests, m.writeBatches, m.stagedWrites, m.standingAside, m.driftFound,
			m.replayDeaths, m.replayKills, m.poisoned, m.survived, m.suspects)
		reg.MustRegister(m.flag.Collectors()...)
	}
	return m
}

// initBridge creates the series of a managed bridge at zero, so alerts on
// them (flowstate_bridge_connected == 0) fire for a bridge that never
// connected.
func (m *Metrics) initBridge(bridge string) {
	m.connected.WithLabelValues(bridge).Set(0)
	m.flag.InitBridge(bridge)
	m.replays.WithLabelValues(bridge, "ok")
	m.replays.WithLabelValues(bridge, "error")
	m.drift.WithLabelValues(bridge)
	m.quarantined.WithLabelValues(bridge)
	m.quarantinedNow.WithLabelValues(bridge).Set(0)
	m.standingAside.WithLabelValues(bridge).Set(0)
	m.driftFound.WithLabelValues(bridge)
	m.replayDeaths.WithLabelValues(bridge)
	m.replayKills.WithLabelValues(bridge)
	m.survived.WithLabelValues(bridge)
	m.suspects.WithLabelValues(bridge).Set(0)
	for _, r := range []string{"ok", "outcome_unknown", "canceled", "invalid_argument", "failed_precondition", "unavailable", "resource_exhausted"} {
		m.writeRequests.WithLabelValues(bridge, r)
	}
	m.writeBatches.WithLabelValues(bridge)
	m.stagedWrites.WithLabelValues(bridge)
}

func (m *Metrics) observeReplay(bridge string, r plan.Replay) {
	result := "ok"
	if r.Err != nil {
		result = "error"
	}
	m.replays.WithLabelValues(bridge, result).Inc()
	m.replayDuration.WithLabelValues(bridge).Observe(r.Duration.Seconds())
	m.replayMessages.WithLabelValues(bridge, "add").Add(float64(r.Adds))
	m.replayMessages.WithLabelValues(bridge, "modify").Add(float64(r.Modifies))
	m.replayMessages.WithLabelValues(bridge, "delete").Add(float64(r.Deletes))
}
