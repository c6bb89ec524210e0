// Package restore is flowstate's restore engine: it keeps every managed bridge
// of ovs-vswitchd equal to the desired state held in the store.
//
// On every (re)connection to a bridge it dumps the switch's flows, computes the
// difference with the desired entries and sends it in one ORDERED|ATOMIC
// bundle; when every bridge has converged it clears
// other_config:flow-restore-wait and waits until vswitchd acknowledged it.
// Writes from controllers (Put, Delete) go through the engine so they reach the
// switch and the store together, serialised with replays per bridge.
package restore
