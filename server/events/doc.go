// Package events is flowstated's in-memory event log: the engine publishes
// what happens to bridges and modules (bridge connected, replay finished,
// flow-restore-wait cleared, drift corrected, ...) and the Watch RPC streams
// it to clients, who resume from the last revision they saw.
//
// # Revisions
//
// [Log.Publish] gives every event the next revision, starting at 1; a
// revision is never reused within a process. Revisions restart at 1 when
// flowstated restarts, so they only order events of one process: a client
// that resumes across a restart is only caught when its revision is beyond
// the new process's (ErrFutureRevision), so the Watch RPC should pair the
// revision with a per-process identifier.
//
// The log retains the last [Options.Capacity] events. [Log.Subscribe] with
// from > 0 first delivers the retained events after from, then live ones, with
// no gap and no duplicate. If events after from have already been discarded
// it fails with a [*CompactedError] (matching [ErrCompacted]) that names the
// oldest retained revision; a from beyond the current revision fails with
// [ErrFutureRevision]. Either way the client
// must resync: read the current state, then watch from now. from = 0 means
// "from now": only events published after Subscribe returns.
//
// # Subscribers
//
// The producer never blocks. Each [Subscription] owns one goroutine that
// follows the log and delivers on [Subscription.C]. A subscription that falls
// more than [Options.SubscriberBuffer] live events behind is dropped: C is
// closed, [Subscription.Err] returns [ErrSlowSubscriber] and [Log.Dropped]
// counts it. The client may resubscribe from its last revision. When nothing
// was delivered for [Options.Heartbeat], a [Heartbeat] event is sent; its
// Revision is the last revision the subscription covered (the current one
// when it is caught up) and it consumes no revision, so a silent stream is
// told apart from a dead one.
//
// A [Log] is safe for concurrent use. [Subscription.Close] and [Log.Close]
// stop the goroutines and wait for them. Delivered events share their Attrs
// map with every other subscriber: treat them as read-only.
//
// # Errors
//
// [ErrCompacted] and [ErrFutureRevision] wrap errdefs.ErrFailedPrecondition;
// [ErrSlowSubscriber] and [ErrClosed] wrap errdefs.ErrUnavailable (the client
// may retry). A subscription ended by its context reports the context's error.
package events
