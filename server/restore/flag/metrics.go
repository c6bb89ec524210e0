package flag

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the flag's Prometheus collectors; the caller registers them
// (Collectors).
type Metrics struct {
	cleared     prometheus.Counter
	rearmed     prometheus.Counter
	notRestored *prometheus.GaugeVec
}

// NewMetrics creates the collectors, not registered.
func NewMetrics() *Metrics {
	return &Metrics{
		cleared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flowstate_flow_restore_wait_cleared_total", Help: "Times flow-restore-wait was cleared, acknowledged by vswitchd, and released a vswitchd that had not been released before.",
		}),
		rearmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flowstate_flow_restore_wait_rearmed_total", Help: "Times flow-restore-wait was set back to true after a restore.",
		}),
		notRestored: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowstate_bridge_not_restored",
			Help: "1 while flow-restore-wait was released without this bridge: missing from OVSDB, or not restored within --max-hold.",
		}, []string{"bridge"}),
	}
}

// Collectors are the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.cleared, m.rearmed, m.notRestored}
}

// InitBridge creates a managed bridge's series at zero, so an alert on it
// fires for a bridge the flag never excused.
func (m *Metrics) InitBridge(bridge string) {
	m.notRestored.WithLabelValues(bridge).Set(0)
}
