// Package server is flowstated: it opens the store, runs the restore engine
// (package restore) and serves the gRPC API (flowstate.v1, health,
// reflection) on a unix socket, and Prometheus metrics over HTTP.
//
// The gRPC service only validates and converts; errors are mapped to gRPC
// codes in one place (toGRPC).
package server
