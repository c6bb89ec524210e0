// Package poison is the crash-loop protection of replays: a replay never
// becomes a crash loop.
//
// An entry that crashes ovs-vswitchd (however it got into the store) would
// crash every vswitchd start, as each start replays it, and with
// flow-restore-wait re-armed the node would stay dark. So flowstated
// watches every replay that sends something, and keeps a small record per
// bridge in the store (store.CrashRecord). A Tracker is one bridge's view of
// that record, kept in the bridge's state (package bridge); its callers (the
// replay, and the coordinator's bridge goroutine) hold the bridge's lock
// around every call but Death, and the replay quarantines what Held
// returns. The Tracker reaches the store, the bridge and vswitchd only through the
// interfaces of its Config (Crashes, Desired, Replayer, Vswitchd), and the
// Evidence (evidence.go) tells a crash from a kill.
//
//  1. A replay that sent messages is watched (Begin, Watch). If it failed
//     because the OpenFlow connection dropped, and vswitchd died (it exited
//     leaving its pidfile: vswitchdGone), the evidence says why (Death:
//     the proc connector's exit status, vswitchd's log). A kill from
//     outside (SIGKILL, SIGTERM, SIGINT, SIGHUP: an operator, the OOM
//     killer) is not counted; a crash, or a death no evidence explains, is
//     a death, recorded durably (RecordDeath); deaths older than
//     Config.CrashWindow are forgotten. A death after the replay completed
//     is not counted: by then it cannot be told from an operator's kill -9
//     or an unrelated crash, and the entries are on the switch.
//  2. Once vswitchd survives a replay (stays up SurviveAfter after it
//     completed: Survived), the record keeps a digest of what the switch
//     holds (the desired entries minus the quarantined ones): per digest
//     bucket (a hash of the entry's key, digestBuckets of them) a
//     combination of hashes of key and payload. The deaths are forgotten.
//  3. At the second death in a window the suspects are drawn: the desired
//     entries in the digest buckets that changed since the survived digest
//     (a superset of the entries added or changed since), or every entry
//     when no digest is known or none changed. They are held out (Held),
//     named in status as quarantined, and the next replay restores
//     everything else: the node forwards again at the third vswitchd start
//     at the latest. They are only suspected: believed bad (Bad) when the
//     evidence showed the second death a crash, not known to be otherwise.
//     With that evidence the range is proven as a probe's (Died: the
//     replays that died sent every suspect), so a lone suspect is named at
//     once.
//  4. The suspects are bisected across restarts, one probe at a time, each
//     only after vswitchd survived the previous replay (bisect.go): a Bad
//     range sends its first half back; any other range, or a Bad one of a
//     single entry, all of it (so deaths no evidence explained cost one
//     probe, and if they were kills every suspect is back after it). A
//     probe vswitchd survives is committed (its entries are no longer
//     suspects; the rest of a Bad range stays Bad, unproven); a probe it
//     dies on proves the range it sent bad (SuspectRange.Died), and the
//     rest of its range is no longer believed bad. The death of a probe
//     is not counted in step 3, and every replay after it holds out all
//     remaining suspects, so the node is never held across more than one
//     probe's crash. A kill from outside during a probe (step 1) leaves it
//     under way: the next replay sends it again.
//  5. An entry is named only when a probe that sent it alone died (Died ==
//     1): it is quarantined as poisoned (status, event, metric), until its
//     module changes or deletes it. No entry a dying probe did not send is
//     ever named, whatever killed vswitchd. The other suspects all went
//     back to the switch.
//  6. Two deaths again while suspects are held out (the suspects were not the
//     cause) widen the suspects to every entry.
package poison
