// Command follow counts the places a write passes through flowstated, from a
// trace of one write (scripts/follow.sh, issue 32): the lines of `dlv
// trace` of a flowstated built without inlining, each call and return of a
// function of the module on its goroutine.
//
// A write runs on several goroutines (the caller, the bridge's write owner,
// the pipe's storer, the bundle's producer). For each goroutine that runs a
// function of -via (the write path), follow prints the stays in the order
// they ran: a stay is a run of consecutive functions of one package, the
// leaf packages of -leaf (bytes and logs: entry, canon) counting as the
// package that called them (bytes, syntax, the API's messages). A return is a stay in a package that goroutine
// had already left. The totals are the sums over those goroutines.
//
//	go run ./tools/follow -from 'server.\(\*service\).Put$' < put.trace
//
// With -controller it is instead the controller of a proxied FLOW_MOD:
// connected and past its HELLO before the trace starts (controller.go).
package main
