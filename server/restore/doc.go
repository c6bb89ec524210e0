// Package restore is flowstate's restore engine: it keeps every managed bridge
// of ovs-vswitchd equal to the desired state held in the store.
//
// On every (re)connection to a bridge it dumps the switch's flows, computes the
// difference with the desired entries and sends it in one ORDERED|ATOMIC
// bundle; when every bridge has converged it clears
// other_config:flow-restore-wait and waits until vswitchd acknowledged it.
// Writes from controllers (Put, Sync, Delete) go through the engine so they
// reach the switch and the store together, serialised with replays per
// bridge; writes of flows stream to the switch while the store decides them
// (writestream.go), writes too large to hold in memory are staged on disk
// and swapped in once the switch took them (writestaged.go), and a reconcile that finds the switch equal to the store
// knows it by digest, without comparing flow by flow (digest.go).
package restore
