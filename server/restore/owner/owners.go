package owner

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/store"
)

// Owners decides, per managed bridge, what of it this engine may change:
// whether this store manages it (owner.go), what a controller relayed by
// the guard installed while flowstated was away (adopt.go), and what
// unrecorded controllers behind the proxy installed (kept.go).
type Owners struct {
	cfg     Config
	log     *slog.Logger
	bridges map[string]*bridgeOwner
	order   []string
}

// bridgeOwner is one bridge's state and what Owners keeps of it.
type bridgeOwner struct {
	*bridge.State
	// owner says whether this engine may change the bridge (owner.go).
	owner ownerState
	// kept holds what unrecorded controllers behind the proxy installed,
	// left alone (kept.go); its own lock.
	kept keptSet
	// adopt is the learning of a relayed controller's state pending for
	// the first reconcile (adopt.go), nil when none.
	adopt atomic.Pointer[adoption]
}

// Config wires Owners; every field is required but TakeOver and Instance.
type Config struct {
	Store *store.Store
	// Bridges are the states of the managed bridges, in flag order.
	Bridges []*bridge.State
	// Forms are the switch's forms of opaque entries (package forms).
	Forms *canon.Forms
	// OwnedCookie is the cookie space whose flows the engine manages.
	OwnedCookie entry.CookieSpace
	// TakeOver and Instance are restore.Config's.
	TakeOver bool
	Instance string
	// RetryInterval is the pause between two rounds of a claim.
	RetryInterval time.Duration
	Flag          Flag
	Vswitchd      Vswitchd
	// StandingAside is 1 while the engine stands aside from a bridge.
	StandingAside *prometheus.GaugeVec
	Publish       func(events.Event)
	Logger        *slog.Logger
}

// Flag is what ownership asks of the flow-restore-wait protocol and its
// OVSDB client (package flag).
type Flag interface {
	// OVSDBUp is closed once OVSDB first connected.
	OVSDBUp() <-chan struct{}
	// OVSDB is the OVSDB client, nil while not connected.
	OVSDB() *ovsconfig.Client
	// HeldReleased says whether vswitchd is held, whether that is known,
	// and which vswitchd a flowstated of this store last released.
	HeldReleased() (held, known bool, released string)
}

// Vswitchd names the running ovs-vswitchd (vswitchd.Daemon.Identity) and
// a bridge's switch in it (vswitchd.Daemon.BridgeIdentity).
type Vswitchd interface {
	Identity() string
	BridgeIdentity(bridge string) string
}

// New returns the Owners of cfg.Bridges, with the decisions to stand aside
// and the kept sets the store holds.
func New(cfg Config) (*Owners, error) {
	ow := &Owners{cfg: cfg, log: cfg.Logger, bridges: make(map[string]*bridgeOwner, len(cfg.Bridges))}
	for _, b := range cfg.Bridges {
		ow.bridges[b.Name()] = &bridgeOwner{State: b}
		ow.order = append(ow.order, b.Name())
	}
	if err := ow.loadStoodAside(); err != nil {
		return nil, err
	}
	for _, name := range ow.order {
		ow.loadKept(ow.bridges[name])
	}
	return ow, nil
}

// Run stores every bridge's kept set as it changes, until ctx is
// cancelled.
func (ow *Owners) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, name := range ow.order {
		b := ow.bridges[name]
		wg.Go(func() { ow.runKept(ctx, b) })
	}
	wg.Wait()
}

// Claim decides, before the first replay of bridge on conn, whether this
// store may manage it (see claim).
func (ow *Owners) Claim(ctx context.Context, name string, conn *ofconn.Conn, log *slog.Logger) bool {
	return ow.claim(ctx, ow.bridges[name], conn, log)
}

// Check fails the replays of a bridge this engine has not claimed.
func (ow *Owners) Check(name string) error { return ow.bridges[name].owner.check(name) }

// StandingAside reports whether this engine refused the bridge and has not
// claimed it since.
func (ow *Owners) StandingAside(name string) bool { return ow.bridges[name].owner.standingAside() }

// KeptFilter returns the filter of one dump of bridge, nil when nothing is
// left alone.
func (ow *Owners) KeptFilter(name string) *KeptFilter { return ow.keptFilter(ow.bridges[name]) }

// KeptStatus is the state of bridge's kept set: the switch entries its last
// dump left alone, and whether every undeclared entry is.
func (ow *Owners) KeptStatus(name string) (found int, all bool) {
	return ow.bridges[name].kept.status()
}

func (ow *Owners) bridge(name string) (*bridgeOwner, error) {
	b, ok := ow.bridges[name]
	if !ok {
		return nil, bridge.NotManaged(name)
	}
	return b, nil
}
