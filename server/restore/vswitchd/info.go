package vswitchd

import (
	"context"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// The vswitchd's version decides what flowstated asks of it, never a
// replay that fails: each new OpenFlow connection asks the switch for its
// description (OFPMP_DESC, whose software field OVS sets to the version of
// the vswitchd that runs), and the engine keeps the last one. OVSDB's
// ovs_version, written by ovs-ctl only, is shown beside it. What a version
// lacks is listed in Limits, logged once per version, and acted on:
//
//   - before 3.0 there is no OpenFlow 1.5 flow monitor, so the mirror of
//     an unmanaged bridge does not ask for one and dumps every interval;
//   - before 2.15 nothing was tested (docs/operations.md, support matrix).
//
// What a version refuses that another takes (2.15: encap(mpls)) is not
// listed: the running vswitchd says so itself, and its refusal carries its
// version (vswitchd): a live Put fails naming it, a replay quarantines the
// entry with it, and a new connection lifts the quarantine.
//
// Bundles are not probed: a vswitchd that completes the OpenFlow 1.5
// handshake takes OpenFlow 1.5 bundles (OVS 2.5 on). One that does not is
// ofconn.ErrVersion at every dial: its bridges stay unconnected, which
// status shows, and --max-hold releases the node without them.

// Info is what flowstated knows of the running ovs-vswitchd's build.
type Info struct {
	// Version is the vswitchd's version from a bridge's OpenFlow
	// description, "" until a bridge answered one.
	Version string
	// OVSDBVersion is the Open_vSwitch table's ovs_version ("" when nothing
	// wrote it); it may name a package installed since vswitchd started.
	OVSDBVersion string
	// Limits says what this vswitchd lacks that flowstated would use, and
	// what flowstated does instead; empty when nothing.
	Limits []string
	// noMonitor is true when the version has no OpenFlow 1.5 flow monitor.
	noMonitor bool
}

// Info returns what flowstated knows of the running vswitchd's build.
func (d *Daemon) Info() Info {
	var info Info
	if p := d.info.Load(); p != nil {
		info = *p
		info.Limits = append([]string(nil), p.Limits...)
	}
	if c := d.cfg.OVSDB.OVSDB(); c != nil {
		info.OVSDBVersion, _ = c.OVSVersion()
	}
	return info
}

// Name names the running ovs-vswitchd with its version ("ovs-vswitchd
// 2.15.0"), or without it until a bridge described the switch: a refusal
// says which version refused, as another may take the entry.
func (d *Daemon) Name() string {
	if p := d.info.Load(); p != nil && p.Version != "" {
		return "ovs-vswitchd " + p.Version
	}
	return "ovs-vswitchd"
}

// infoOf is what desc, one bridge's description, says of vswitchd.
func infoOf(desc ofconn.SwitchDesc) Info {
	info := Info{Version: desc.Software}
	major, minor, ok := desc.OVSVersion()
	if !ok {
		return info
	}
	if !desc.HasFlowMonitor() {
		info.noMonitor = true
		info.Limits = append(info.Limits, "no OpenFlow 1.5 flow monitor (Open vSwitch 3.0 and later): unmanaged bridges are dumped every --mirror-interval")
	}
	if major < 2 || major == 2 && minor < 15 {
		info.Limits = append(info.Limits, "older than Open vSwitch 2.15, the oldest version flowstate is tested with")
	}
	return info
}

// noteSwitch asks conn's switch for its description and keeps what it says
// of vswitchd, logging a new version and its limits once. A switch that
// does not answer within the echo timeout leaves the last one in place:
// the connection's owner finds out soon enough what is wrong with it.
func (d *Daemon) noteSwitch(ctx context.Context, conn *ofconn.Conn, log *slog.Logger) {
	timeout := d.cfg.EchoTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	desc, err := conn.Describe(dctx)
	if err != nil {
		log.Debug("the switch did not describe itself", "err", err)
		return
	}
	info := infoOf(desc)
	if old := d.info.Swap(&info); old != nil && old.Version == info.Version {
		return
	}
	d.log.Info("ovs-vswitchd version", "version", info.Version)
	for _, l := range info.Limits {
		d.log.Warn("ovs-vswitchd lacks what flowstated would use", "version", info.Version, "limit", l)
	}
}

// CanMonitor reports whether the running vswitchd may take a flow monitor:
// false only when its version is known to have none.
func (d *Daemon) CanMonitor() bool {
	p := d.info.Load()
	return p == nil || !p.noMonitor
}
