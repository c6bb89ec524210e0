// Package clienttest holds the tests of package client that need a running
// flowstated and an Open vSwitch sandbox. They live in the main module, not
// beside the client, so that the client's own module requires nothing of the
// daemon's (bbolt, libovsdb, libOpenflow, Prometheus): a controller that
// imports the client gets grpc, protobuf and the flowstate API only.
package clienttest
