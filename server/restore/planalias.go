package restore

import (
	"context"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// Transitional names for package plan (issue 32), so the files other
// helpers edit meanwhile compile unchanged. The lead replaces their uses by
// plan's own names and deletes this file in one mechanical commit.

type (
	// Op is plan.Op.
	Op = plan.Op
	// Change is plan.Change.
	Change = plan.Change
	// RejectedError is plan.RejectedError.
	RejectedError = plan.RejectedError
	// Replay is plan.Replay.
	Replay = plan.Replay

	sendOrder    = plan.SendOrder
	actualEntry  = plan.ActualEntry
	bundleSource = plan.BundleSource
)

// The operations of a change (plan's).
const (
	OpAdd    = plan.OpAdd
	OpModify = plan.OpModify
	OpDelete = plan.OpDelete
)

var errWriteAborted = plan.ErrAborted

func key(k entry.Kind, id []byte) string { return plan.Key(k, id) }

func newSendOrder(cs []Change) *sendOrder { return plan.NewSendOrder(cs) }

func diff(desired []entry.Entry, actual []actualEntry, skip map[string]bool) []Change {
	return plan.Diff(desired, actual, skip)
}

func appendWriteChanges(cs []Change, changed []store.Change, removed []entry.Entry) []Change {
	return plan.AppendWriteChanges(cs, changed, removed)
}

func writeChange(c store.Change) Change { return plan.WriteChange(c) }

func changesSource(cs []Change) bundleSource { return plan.ChangesSource(cs) }

func applySendOrder(ctx context.Context, conn *ofconn.Conn, p *sendOrder) (plan.ApplyStats, error) {
	return plan.ApplySendOrder(ctx, conn, p)
}

func applyChanges(ctx context.Context, conn *ofconn.Conn, pre []Change, bundle bundleSource, post []Change) (plan.ApplyStats, error) {
	return plan.ApplyChanges(ctx, conn, pre, bundle, post)
}

func dumpGroupsMeters(ctx context.Context, conn *ofconn.Conn) ([]actualEntry, error) {
	return plan.DumpGroupsMeters(ctx, conn)
}
