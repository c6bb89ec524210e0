// Package client is the Go library controllers use to declare their OpenFlow
// entries to flowstated.
//
// A Client is safe for concurrent use and must be closed. It pings the server
// to detect a silent peer, retries calls that fail with UNAVAILABLE, and
// returns errors of the kinds in package errdefs (test them with errors.Is);
// an error about one entry of a request is an *errdefs.EntryError carrying the
// entry's index.
//
// Entries are given in ovs-ofctl syntax (FlowText) or as encoded OpenFlow 1.5
// FLOW_MOD messages (FlowBytes), e.g. built with antrea.io/libOpenflow.
package client
