// Package client is the Go library controllers use to declare their OpenFlow
// entries to flowstated and to follow what it does.
//
// # Connection
//
// New connects to flowstated's unix socket (DefaultTarget; a bare path works
// too). A Client is safe for concurrent use and must be closed. It pings the
// server (KeepaliveTime, KeepaliveTimeout), so a frozen flowstated fails
// calls with UNAVAILABLE instead of leaving them hanging, and retries calls
// that fail with UNAVAILABLE: every call is atomic, so a retry cannot apply
// part of a request twice.
//
// # Writing
//
// Entries are given in ovs-ofctl syntax (FlowText, GroupText, MeterText) or
// as encoded OpenFlow 1.5 FLOW_MOD messages (FlowBytes), e.g. built with
// antrea.io/libOpenflow. Put and Delete change some entries of a module, Sync
// replaces its whole set, MarkReady tells the boot gate the module is ready.
// PutSeq and SyncSeq stream entries from an iterator as it yields them, for
// sets too large to build in memory first.
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
