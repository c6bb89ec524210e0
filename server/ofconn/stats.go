package ofconn

import (
	"sync/atomic"
	"time"
)

// Stats are a connection's counters since Dial.
type Stats struct {
	// Sent counts messages written, by type name (see TypeName). Messages carried in bundles count under their
	// own type (FLOW_MOD...) and once more as BUNDLE_ADD_MESSAGE.
	Sent map[string]uint64
	// BytesSent counts bytes written.
	BytesSent uint64
	// Received and BytesReceived count messages and bytes read after the handshake.
	Received      uint64
	BytesReceived uint64
	// BundlesCommitted and BundlesFailed count Bundle calls that committed, and that OVS rejected.
	BundlesCommitted uint64
	BundlesFailed    uint64
	// EchoRTT is the round trip time of the last answered ECHO_REQUEST; 0 before the first.
	EchoRTT time.Duration
}

type counters struct {
	sent                    [256]atomic.Uint64
	bytesSent               atomic.Uint64
	received, bytesReceived atomic.Uint64
	bundlesOK, bundlesBad   atomic.Uint64
	echoRTT                 atomic.Int64
}

func (s *counters) countSent(typ uint8, bytes int) {
	s.sent[typ].Add(1)
	s.bytesSent.Add(uint64(bytes))
}

// Stats returns a snapshot of the connection's counters.
func (c *Conn) Stats() Stats {
	s := Stats{
		Sent:             make(map[string]uint64),
		BytesSent:        c.stats.bytesSent.Load(),
		Received:         c.stats.received.Load(),
		BytesReceived:    c.stats.bytesReceived.Load(),
		BundlesCommitted: c.stats.bundlesOK.Load(),
		BundlesFailed:    c.stats.bundlesBad.Load(),
		EchoRTT:          time.Duration(c.stats.echoRTT.Load()),
	}
	for t := range c.stats.sent {
		if n := c.stats.sent[t].Load(); n > 0 {
			s.Sent[TypeName(uint8(t))] = n
		}
	}
	return s
}
