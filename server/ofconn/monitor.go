package ofconn

import (
	"context"
	"errors"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
)

// Flow monitor: the switch tells when flows change, so that a caller keeping
// a copy of a bridge (the mirror of an unmanaged bridge) dumps it only after a
// change instead of every few seconds.
//
//  1. MonitorFlows sets the connection's change channel, then sends one
//     OpenFlow 1.5 OFPMP_FLOW_MONITOR request (monitor 1, command ADD, every
//     table, any out port and group, an empty match; flags ADD, REMOVED and
//     MODIFY, without INITIAL: the caller dumps) and a barrier, and waits
//     for the request's reply. OVS supports this standard form since 3.0
//     (lib/ofp-monitor.c, commit c3e64047d); 2.15 and 2.17 read it as a Nicira
//     NXST_FLOW_MONITOR and refuse its flags, with an OpenFlow 1.0 error
//     that names no request (foreign.go). Either refusal (an OFPT_ERROR, or
//     the barrier's reply first) leaves the caller with no monitor, on a
//     connection that stays up: it must poll.
//  2. From then on OVS sends an OFPMP_FLOW_MONITOR reply with xid 0 for
//     every batch of flow changes, by any connection (a change made over
//     this one comes abbreviated: OFPFME_ABBREV), and OFPFME_PAUSED and
//     OFPFME_RESUMED when it stops reporting because this connection's
//     backlog is full, and starts again. The reader (readLoop, flowUpdate)
//     turns each into a value on the channel, coalesced: it says that
//     something changed since the last receive, not what.
//  3. Groups and meters are not monitored: OpenFlow has no such monitor.
//     The monitor lives as long as the connection.

// Flags of ofp_flow_monitor_request (OpenFlow 1.5, 7.3.5.19).
const (
	fmfAdd     = 1 << 1
	fmfRemoved = 1 << 2
	fmfModify  = 1 << 3
)

const flowMonitorID = 1

// errMonitoring: MonitorFlows was called twice on one connection.
var errMonitoring = errors.New("ofconn: flows are monitored already on this connection")

// MonitorFlows asks the switch to report every flow added, modified or
// removed in any table of the bridge, and returns a channel that receives a
// value whenever reports arrived since the last receive. Only changes made
// after MonitorFlows returned are certain to be reported, so dump after it.
// The channel is never closed: select on Done too. A switch that refuses the
// monitor yields its *OFError, or a *ForeignError (OVS 2.15); the connection
// stays usable. A connection
// takes one monitor.
func (c *Conn) MonitorFlows(ctx context.Context) (<-chan struct{}, error) {
	return c.monitorFlows(ctx, fmfAdd|fmfRemoved|fmfModify)
}

// monitorFlows is MonitorFlows with the request's flags.
func (c *Conn) monitorFlows(ctx context.Context, flags uint16) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	if !c.flowChanges.CompareAndSwap(nil, &ch) {
		return nil, errMonitoring
	}
	req := openflow15.NewFlowMonitorRequest(flowMonitorID)
	req.OutPort, req.OutGroup = openflow15.P_ANY, openflow15.OFPG_ANY
	req.Flags = flags
	req.TableId = openflow15.OFPTT_ALL
	req.Command = openflow15.FMC_ADD
	// The reply carries the flows of INITIAL, which is not asked for.
	err := c.multiparts(ctx, openflow15.MultipartType_FlowMonitor, []util.Message{req}, true, 4, func([]byte) error { return nil })
	if err != nil {
		c.flowChanges.Store(nil)
		return nil, fmt.Errorf("ofconn: flow monitor: %w", err)
	}
	return ch, nil
}

// flowUpdate handles f if it is an asynchronous flow monitor report (xid 0)
// and tells the monitor's channel; it reports whether f was one.
func (c *Conn) flowUpdate(f []byte) bool {
	if f[1] != openflow15.Type_MultiPartReply || frameXid(f) != 0 || len(f) < headerLen+8 ||
		be.Uint16(f[8:10]) != openflow15.MultipartType_FlowMonitor {
		return false
	}
	if ch := c.flowChanges.Load(); ch != nil {
		select {
		case *ch <- struct{}{}:
		default:
		}
	}
	return true
}
