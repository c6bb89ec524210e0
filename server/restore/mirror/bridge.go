package mirror

import (
	"context"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
)

// bridge is one unmanaged bridge. Its goroutine (runMirror) is the only
// writer of conn and the dump state; Settled reads them.
type bridge struct {
	name string
	stop context.CancelFunc // nil while no goroutine runs
	done chan struct{}

	mu   sync.Mutex
	conn *ofconn.Conn
	// settled is true once the first dump of conn was handled: restored,
	// nothing to restore, or given up.
	settled bool
	// holding is when the mirror first held a release back while unsettled
	// (zero: it has not); after MaxHold it is not waited for.
	holding  time.Time
	gaveUp   bool
	entries  int
	updated  time.Time
	restored bool
	last     plan.Replay
	// dumps and quiet count as State's Dumps and Quiet.
	dumps, quiet int
	// noMonitor is why the switch last refused a flow monitor ("": it did
	// not). Only runMirror's goroutine uses it: the refusal of a vswitchd
	// that cannot monitor is logged once, not at every connection.
	noMonitor string
}

func connAlive(c *ofconn.Conn) bool {
	if c == nil {
		return false
	}
	select {
	case <-c.Done():
		return false
	default:
		return true
	}
}

func (m *bridge) setConn(c *ofconn.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conn, m.settled, m.holding, m.gaveUp, m.restored = c, false, time.Time{}, false, false
	m.dumps, m.quiet = 0, 0
}

// count counts one interval of serve: a full dump or a quiet one.
func (m *bridge) count(dumped bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if dumped {
		m.dumps++
	} else {
		m.quiet++
	}
}

func (m *bridge) settle(restored bool, r *plan.Replay) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settled, m.holding, m.restored = true, time.Time{}, restored
	if r != nil {
		m.last = *r
	}
}

func (m *bridge) status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Status{
		Name: m.name, Connected: connAlive(m.conn), Converged: m.settled && connAlive(m.conn), Last: m.last,
		State: State{Entries: m.entries, Updated: m.updated, Restored: m.restored, Dumps: m.dumps, Quiet: m.quiet},
	}
}
