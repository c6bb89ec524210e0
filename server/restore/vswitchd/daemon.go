package vswitchd

import (
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
)

// Daemon is the engine's view of the running ovs-vswitchd: the OpenFlow
// connections to its bridges (KeepConnected, Connected), its build (Info)
// and its identity (Identity).
type Daemon struct {
	cfg Config
	log *slog.Logger
	// info is the running vswitchd's build, nil until a bridge described
	// itself.
	info atomic.Pointer[Info]
}

// Config wires a Daemon. RunDir, OVSDB, RetryInterval, Publish, Connected
// and Logger are required.
type Config struct {
	// RunDir holds vswitchd's pidfile and the <bridge>.mgmt sockets.
	RunDir string
	// EchoInterval and EchoTimeout tune OpenFlow liveness (ofconn defaults
	// when 0); RetryInterval is the longest pause between dial attempts.
	EchoInterval, EchoTimeout, RetryInterval time.Duration
	OVSDB                                    OVSDB
	Publish                                  func(events.Event)
	// Connected is 1 while a bridge's OpenFlow connection is up, by bridge.
	Connected *prometheus.GaugeVec
	Logger    *slog.Logger
}

// OVSDB gives the OVSDB client (package flag), nil while not connected.
type OVSDB interface {
	OVSDB() *ovsconfig.Client
}

// New returns the Daemon of cfg.
func New(cfg Config) *Daemon { return &Daemon{cfg: cfg, log: cfg.Logger} }

// MgmtPath is the management socket of bridge.
func (d *Daemon) MgmtPath(bridge string) string { return filepath.Join(d.cfg.RunDir, bridge+".mgmt") }

// Identity names the running ovs-vswitchd by its pidfile (pid and start
// time), "" when unknown.
func (d *Daemon) Identity() string { return ovsconfig.VswitchdIdentity(d.cfg.RunDir) }

// BridgeIdentity names bridge's switch in the running ovs-vswitchd
// (ovsconfig.BridgeIdentity): a bridge deleted and created again under the
// same vswitchd has another. "" when unknown.
func (d *Daemon) BridgeIdentity(bridge string) string {
	return ovsconfig.BridgeIdentity(d.cfg.RunDir, bridge)
}
