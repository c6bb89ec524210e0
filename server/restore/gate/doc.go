// Package gate holds flowstated's cold-start gate: after a host reboot,
// replays wait until every required module has synced its desired state and
// marked itself ready for this boot, or until the readiness timeout.
//
// One Gate per engine, run by one goroutine (Run), which alone opens it. Its
// contract, in the order Run follows it:
//
//  1. Warm start (the gate of this boot opened before) or no required
//     module: open at once; the store is current, replay without waiting.
//  2. Cold start: wait until every required module has synced and marked
//     itself ready for this boot (MarkReady).
//  3. Or until the readiness timeout, counted from the first start in this
//     boot (a restarted flowstated keeps the deadline): then replay the last
//     known state, and say so loudly (log, event, metric, status).
//  4. Record in the store that this boot's gate opened, so a flowstated
//     restarted later in the boot starts warm. Until then every restart
//     stays cold and keeps waiting.
//
// The gate never closes again once open. Readers (Opened, IsOpen, OpenedAt,
// Status) never wait for Run.
package gate
