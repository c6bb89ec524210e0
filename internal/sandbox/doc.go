// Package sandbox runs a private, unprivileged Open vSwitch (ovsdb-server
// and ovs-vswitchd with the userspace dummy datapath) in a short temporary
// directory, for tests and demos that need the real switch: OpenFlow 1.5 on
// <bridge>.mgmt, OVSDB on db.sock, flow-restore-wait, restarts, crashes and
// hangs of vswitchd, and injected packets whose forwarding shows in port
// counters. It never touches the host's /var/run/openvswitch.
//
// # Layout
//
// Everything lives in one directory (Dir, also RunDir): conf.db, db.sock,
// ovsdb-server.{pid,log,ctl,out}, ovs-vswitchd.{pid,log,ctl,out} and one
// <bridge>.mgmt (plus <bridge>.snoop) per bridge. The daemons run with
// OVS_RUNDIR, OVS_DBDIR, OVS_LOGDIR and OVS_SYSCONFDIR set to it (Env), so
// `ovs-ofctl dump-flows br0` with that environment reaches this sandbox.
// Unix socket paths are limited to 107 bytes, hence os.MkdirTemp("", "ovs")
// rather than a deep t.TempDir.
//
// vswitchd runs as
//
//	ovs-vswitchd unix:DIR/db.sock --enable-dummy=override --disable-system \
//	    --no-chdir --pidfile=... --log-file=... --unixctl=DIR/ovs-vswitchd.ctl -vconsole:off
//
// --enable-dummy=override turns every datapath type into the userspace dummy
// and registers the netdev-dummy/* commands; --disable-system keeps it away
// from the kernel datapath, so no privileges are needed. Bridges get
// datapath_type=dummy and the default (standalone) fail mode, so a fresh
// bridge holds `priority=0 actions=NORMAL`; ports are type=dummy with
// ofport_request.
//
// # Lifecycle
//
// Start returns with both daemons running and the database initialised
// (`ovs-vsctl --no-wait init`). The daemons are children of the Go process,
// not --detach daemons: Close (or a failed Start) stops them and waits, and
// on Linux they get SIGKILL if the Go process dies (Pdeathsig). A directory
// created by Start is removed by Close, but not when the process is killed.
//
// Readiness is polled, never slept for: ovsdb-server is ready when db.sock
// accepts, vswitchd when its control socket and every bridge's .mgmt accept
// (vswitchd opens the management listener after adding the bridge's ports).
//
// StopVswitchd is graceful (`ovs-appctl exit`, else SIGTERM) and vswitchd
// removes its pidfile and sockets. KillVswitchd is a crash: SIGKILL, and the
// stale pidfile and sockets stay (a dial of <bridge>.mgmt is refused), as on
// a real host; StartVswitchd removes them first. FreezeVswitchd (SIGSTOP)
// leaves the sockets accepting while nothing answers, like a hung switch.
// Port counters restart from zero with vswitchd.
//
// Methods are safe for concurrent use; lifecycle methods are serialised.
// Errors start with "sandbox: " and carry the tool's stderr; a vswitchd
// that does not come up adds the tail of its log. A missing binary or
// schema yields ErrNotInstalled, whose text is InstallHint.
//
// # Injecting packets
//
// InjectSYN runs `ovs-appctl netdev-dummy/receive PORT FLOW` with a TCP SYN
// in datapath flow syntax, e.g.
//
//	eth(src=50:54:00:00:00:01,dst=50:54:00:00:00:02),eth_type(0x0800),
//	ipv4(src=10.0.0.1,dst=10.0.0.2,proto=6,tos=0,ttl=64,frag=no),
//	tcp(src=40000,dst=80),tcp_flags(syn)
//
// (one argument, no spaces). It must be a SYN: a ct() pipeline marks other
// segments of an unknown connection invalid. vswitchd's main thread reads
// the packet from the dummy port, counts it in the port's rx counter, runs
// the upcall and sends it in one pass, so once PortStats shows the rx
// increment, the output port's tx counter is final.
//
// # flow-restore-wait, observed against OVS 3.1.0
//
// Setup: a bridge br0 with dummy ports p1 (ofport 1) and p2 (ofport 2), and
// flows replaced by `ovs-ofctl -O OpenFlow15 add-flow br0
// in_port=1,actions=output:2`; counters from `ovs-ofctl dump-ports br0 pN`.
// TestRestartFlowRestoreWait and TestRunningVswitchdIgnoresFlag pin all of
// this down.
//
//  1. Started with the flag: `ovs-vsctl --no-wait set Open_vSwitch .
//     other_config:flow-restore-wait=true` while vswitchd is down, then start
//     it. The bridge holds only `priority=0 actions=NORMAL`, and an injected
//     SYN is counted as received on p1 and sent nowhere (NORMAL would have
//     flooded it to p2): dropped, not queued. Flows added over OpenFlow
//     meanwhile are kept and still forward nothing. After `ovs-vsctl remove
//     Open_vSwitch . other_config flow-restore-wait` (without --no-wait, so
//     next_cfg is bumped and ovs-vsctl returns once cur_cfg caught up), the
//     next SYN is forwarded through the restored flow. LIBRARY-NOTES is
//     right.
//  2. Set while running: vswitchd started with the flag false ignores a later
//     `ovs-vsctl set Open_vSwitch . other_config:flow-restore-wait=true`,
//     even though it acknowledges the bumped next_cfg in cur_cfg. After
//     `ovs-appctl dpctl/del-flows` (so the next packet must take the upcall
//     path) a new SYN is still forwarded to p2. The flag only takes effect at
//     vswitchd's next start: stop and start it without touching the
//     database and the SYN is dropped. This is by design in
//     vswitchd/bridge.c, bridge_run: "Once the value of flow-restore-wait is
//     false, we no longer should check its value from the database" (it is
//     read only while ofproto_get_flow_restore_wait() is still true). Setting
//     the flag on a running switch is therefore a safe way to arm the next
//     (re)start, and never a way to pause forwarding.
package sandbox
