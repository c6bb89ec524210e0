// Package mirror keeps a mirror of the bridges of ovs-vswitchd that
// flowstated does not manage, and restores it after a vswitchd restart in
// the window flow-restore-wait holds.
//
// flow-restore-wait holds every bridge of vswitchd, not only the managed
// ones, and a vswitchd restarted under it brings every bridge back empty (a
// standalone one with the default NORMAL flow). ovs-save would have put an
// unmanaged bridge's flows back on a planned `ovs-ctl restart`; nothing does
// after a crash. So a Set keeps a mirror of every bridge OVSDB lists and
// Config.Managed does not name, and restores it in the gated window:
//
//  1. Run follows the Bridge table and owns one goroutine per unmanaged
//     bridge (runMirror): dial <bridge>.mgmt (Config.KeepConnected), dump
//     flows, groups and meters, and store the dump when it changed; then
//     dump again only after a flow monitor reported a change, or the groups
//     and meters (checked every Config.Interval) changed (serve).
//  2. The first dump of every connection decides first (restore): if
//     vswitchd is held (Config.Pin: the flag is on and the vswitchd
//     its pidfile names has not been released; a bridge rebuilt on a
//     running vswitchd drops the connection too) and the bridge is fresh
//     (nothing but the default flow), the stored mirror is applied with
//     package plan (diff, send order, one bundle). Only then does the dump
//     refresh the mirror: a post-restart empty bridge never overwrites what
//     it must get back.
//  3. The flag waits for every mirror's first dump (Settled), each for at
//     most Config.MaxHold of holding the release, so one bridge that cannot
//     be restored never holds the others for long. Config.Recheck asks the
//     flag to decide again when that may have changed.
//
// Otherwise flowstated never writes to an unmanaged bridge.
//
// The package never imports package restore: what it needs of the engine
// (the flag's lock and its view of vswitchd, the OVSDB client, the store's
// mirror records, the connection keeping) comes in its Config.
package mirror
