// Package plan holds what a replay and a write send to a switch: the changes
// between the desired state and what the switch holds, the order the switch
// takes them in, and their sending, all or nothing as far as the switch
// allows.
//
// It knows nothing of bridges or the engine, and of the store only a
// write's changes (store.Change): its callers (packages replay, write,
// mirror, owner and forms) read the desired state and the switch, and decide
// what a refusal means.
//
//  1. A caller dumps the switch (DumpAll, DumpGroupsMeters) into
//     ActualEntries, or takes a write's changes from the store
//     (AppendWriteChanges, WriteChange).
//  2. Diff compares desired entries with what the switch holds and returns
//     the Changes that make them equal.
//  3. NewSendOrder puts the changes in an order OVS accepts: meters before
//     the bundle, their deletes after it, groups and flows in one bundle.
//  4. ApplySendOrder (or ApplyChanges, with a bundle produced as it
//     streams) sends them; a refusal returns a *RejectedError that names
//     the refused changes, after undoing the meters sent before the bundle.
//  5. Replay records what was sent.
package plan
