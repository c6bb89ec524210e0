// Package client is the Go library controllers use to declare their OpenFlow
// entries to flowstated and to follow what it does.
//
// # Connection
//
// New connects to flowstated's unix socket (DefaultTarget; a bare path works
// too). A Client is safe for concurrent use and must be closed. It pings the
// server (KeepaliveTime, KeepaliveTimeout), so a frozen flowstated is noticed
// instead of leaving calls hanging.
//
// # Retries
//
// Every call but Watch waits for flowstated until its context ends, like
// etcd's clientv3: a missing or refused socket, or a connection lost, is
// retried with capped exponential backoff and jitter (RetryBaseBackoff to
// RetryMaxBackoff), so a flowstated restarted by systemd costs a controller a
// few seconds, not an error. A call whose context ends first returns an error
// wrapping both the context's error and the last UNAVAILABLE cause. Every
// other code returns at once, and so do flowstated's own UNAVAILABLE answers
// (a bridge or OVSDB not connected, flowstated stopping) and a socket the
// caller may not open (EACCES). WithFailFast turns the waiting off, for an
// operator's command that should say at once that flowstated is not there
// (flowctl uses it).
//
// Only what is safe to resend is resent. Put and Sync are declarations: sent
// again after a lost reply they leave the same state (a resent Sync then
// reports nothing added). MarkReady, Arm, Release, Reconcile and the reads
// are idempotent. A Delete resent after flowstated applied it would fail
// NotFound for the entries it removed, so Delete is resent only when it never
// left the client. A stream that breaks once open (flowstated lost in the
// middle of a List or a Sync) returns its error: PutSeq and SyncSeq cannot
// read their sequence twice.
//
// # Writing
//
// Entries are given in ovs-ofctl syntax (FlowText, GroupText, MeterText) or
// as encoded OpenFlow 1.5 FLOW_MOD messages (FlowBytes), e.g. built with
// antrea.io/libOpenflow. Writes name a Module (a bridge and a module name):
// Put and Delete change some of its entries, Sync replaces its whole set and
// returns a SyncResult. MarkReady tells the boot gate a module name is ready
// (on every bridge). PutSeq and SyncSeq stream entries from an iterator as it
// yields them, for sets too large to build in memory first.
//
// The package is a module of its own (with api, entry and errdefs): a
// controller that requires it gets grpc and protobuf, none of flowstated's
// dependencies.
//
// # Reading
//
// Status, Diff, Reconcile and List return this package's types, never the
// API's proto messages. WaitConverged waits until the node forwards through
// its restored pipeline, and its error says what is missing.
//
// # Events
//
// Watch delivers events in order, each once, across reconnections: it
// resumes after the last event seen (Event.Cursor), and returns ErrResync when
// flowstated cannot resume there (it restarted); the caller then reads the
// state again and watches from the zero Cursor.
//
// # Errors
//
// Errors wrap the kinds of package errdefs (ErrInvalidArgument,
// ErrFailedPrecondition, ErrNotFound, ErrPermissionDenied, ErrUnavailable,
// ...): test them with errors.Is. An error about one entry of a request is an
// *errdefs.EntryError carrying the entry's index (errors.As). A call ended by
// its context wraps context.Canceled or context.DeadlineExceeded. Watch adds
// ErrResync.
package client
