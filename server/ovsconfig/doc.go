// Package ovsconfig is flowstate's OVSDB side: it reads and writes
// other_config:flow-restore-wait of the Open_vSwitch table and waits until
// ovs-vswitchd has acknowledged a change (cur_cfg reaches next_cfg).
//
// # Connection
//
// [Dial] connects to ovsdb-server, monitors the Open_vSwitch, Bridge and
// Flow_Table tables (only the columns this package models) and returns once the
// Open_vSwitch row is in the local cache. Reads ([Client.FlowRestoreWait],
// [Client.Config], [Client.Bridges], [Client.TableLimits], ...) are answered from that cache, which
// the monitor keeps current; they never round-trip to the server.
//
// The Client probes the server with an OVSDB echo every
// [Options.InactivityTimeout]; a server that does not answer within that time,
// or a closed connection, marks the Client disconnected. It then redials with
// a capped exponential backoff and rebuilds the cache from a fresh monitor.
// This reconnect loop is the package's own rather than libovsdb's
// (WithReconnect / WithInactivityCheck): libovsdb v0.7.0's loop cannot be
// stopped while the server is unreachable (Close is a no-op then, and a
// backoff that gives up makes it panic), so it would leak a goroutine or crash
// the daemon.
//
// # Acknowledgement
//
// vswitchd rereads the database when next_cfg changes and, once it has applied
// the new configuration, copies next_cfg into cur_cfg. [Client.SetFlowRestoreWait]
// therefore changes the flag and increments next_cfg in one mutate, reads back
// the new next_cfg in the same transaction, and (when asked to) waits until
// cur_cfg has reached it. While vswitchd is not running nothing acknowledges,
// and the wait ends with an error wrapping [ErrNotAcknowledged].
//
// # Errors
//
// Operations on a disconnected Client fail at once with an error wrapping
// [ErrNotConnected]; after Close they wrap [ErrClosed]. Errors of individual
// OVSDB operations are joined under the transaction error.
//
// # Concurrency
//
// A Client is safe for concurrent use. It owns one goroutine (the connection
// supervisor) plus libovsdb's; Close stops them all and waits for them.
package ovsconfig
