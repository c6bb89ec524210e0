// Package vswitchd is the restore engine's view of the running
// ovs-vswitchd (Daemon): the OpenFlow connection of each bridge, managed or
// mirrored, dialled again as soon as vswitchd is back and kept with
// backoff against a switch that drops it (KeepConnected); why a bridge is
// not connected, and what to do (Connected); what its build lacks that
// flowstated would use (Info); and which vswitchd runs (Identity).
//
// It holds no bridge state: KeepConnected reports every connection and
// every loss to the caller's Hooks, which record it on the bridge.
package vswitchd
