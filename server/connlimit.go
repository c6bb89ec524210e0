package server

import (
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxConnsPerUID is the default of Config.MaxConnsPerUID. A
// controller holds one connection and flowctl one per run; an idle gRPC
// connection costs flowstated 25–42 kB, so the cap bounds one peer uid to
// about 10 MB, where 20,000 idle connections once took 800 MB.
const DefaultMaxConnsPerUID = 256

// connLimit caps the API connections each peer uid holds at once. Refusals
// are counted, and logged once per episode: when a uid first reaches the
// cap, and when it is below it again.
type connLimit struct {
	max     int
	log     *slog.Logger
	refused prometheus.Counter

	mu      sync.Mutex
	live    map[uint32]int
	refusal map[uint32]int // refusals of the uid's current episode
}

func newConnLimit(max int, log *slog.Logger, reg prometheus.Registerer) *connLimit {
	l := &connLimit{max: max, log: log, live: map[uint32]int{}, refusal: map[uint32]int{},
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flowstate_api_connections_refused_total",
			Help: "API connections refused because their peer uid held --max-conns-per-uid connections already.",
		})}
	reg.MustRegister(l.refused)
	return l
}

// acquire admits one more connection of uid, or says why not.
func (l *connLimit) acquire(uid uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live[uid] < l.max {
		l.live[uid]++
		return nil
	}
	l.refused.Inc()
	if l.refusal[uid] == 0 {
		l.log.Warn("refusing API connections of a peer at its cap (--max-conns-per-uid): it holds too many already",
			"uid", uid, "max", l.max)
	}
	l.refusal[uid]++
	return fmt.Errorf("server: uid %d holds %d API connections, the cap of --max-conns-per-uid", uid, l.max)
}

// release ends one connection of uid.
func (l *connLimit) release(uid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live[uid]--
	if n := l.refusal[uid]; n > 0 {
		l.log.Info("a peer is below its API connection cap again", "uid", uid, "refused", n)
		delete(l.refusal, uid)
	}
	if l.live[uid] <= 0 {
		delete(l.live, uid)
	}
}

// limitedConn releases its place in the connLimit once, when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
