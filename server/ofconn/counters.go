package ofconn

import (
	"fmt"
	"time"
)

// FlowCounters are the statistics the switch reports with a flow in its dump
// (the OXS fields of ofp_flow_desc's ofp_stats).
type FlowCounters struct {
	Packets, Bytes uint64
	// Duration is how long the switch has held the flow.
	Duration time.Duration
}

// OXS fields of class OFPXSC_OPENFLOW_BASIC (OpenFlow 1.5, 7.2.4).
const (
	oxsClassBasic   = 0x8002
	oxsDuration     = 0
	oxsPacketCount  = 4
	oxsByteCount    = 5
	oxsHeaderLength = 4
)

// Counters returns the flow's counters, read from Raw. A field the switch
// did not send stays zero.
func (f Flow) Counters() (FlowCounters, error) {
	var c FlowCounters
	match := f.MatchBytes()
	if match == nil {
		return c, fmt.Errorf("ofconn: flow entry with a bad match length")
	}
	statsAt := flowDescFixed + len(match)
	if statsAt+4 > len(f.Raw) {
		return c, fmt.Errorf("ofconn: flow entry without stats")
	}
	n := int(be.Uint16(f.Raw[statsAt+2:]))
	if n < 4 || statsAt+n > len(f.Raw) {
		return c, fmt.Errorf("ofconn: flow entry with stats of bad length %d", n)
	}
	for b := f.Raw[statsAt+4 : statsAt+n]; len(b) > 0; {
		if len(b) < oxsHeaderLength {
			return c, fmt.Errorf("ofconn: truncated stats field")
		}
		class, field, size := be.Uint16(b[0:2]), b[2]>>1, int(b[3])
		if oxsHeaderLength+size > len(b) {
			return c, fmt.Errorf("ofconn: stats field %d of %d bytes in %d", field, size, len(b))
		}
		v := b[oxsHeaderLength : oxsHeaderLength+size]
		if class == oxsClassBasic && size == 8 {
			switch field {
			case oxsDuration: // seconds, nanoseconds
				c.Duration = time.Duration(be.Uint32(v[0:4]))*time.Second + time.Duration(be.Uint32(v[4:8]))
			case oxsPacketCount:
				c.Packets = be.Uint64(v)
			case oxsByteCount:
				c.Bytes = be.Uint64(v)
			}
		}
		b = b[oxsHeaderLength+size:]
	}
	return c, nil
}
