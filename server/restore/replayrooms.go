package restore

import (
	"context"
	"log/slog"

	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/replay"
)

// replayRooms is what the replay asks of the engine's other rooms
// (replay.Rooms): ownership, what a relayed controller installed, the TLV
// table, and what unrecorded controllers installed.
type replayRooms struct{ e *Engine }

func (r replayRooms) CheckOwner(name string) error { return r.e.bridges[name].owner.check(name) }

func (r replayRooms) AdoptRelayedLocked(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) error {
	return r.e.adoptRelayedLocked(ctx, r.e.bridges[b.Name()], conn, log)
}

func (r replayRooms) RestoreTLVLocked(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) error {
	return r.e.restoreTLVLocked(ctx, r.e.bridges[b.Name()], conn, log)
}

func (r replayRooms) Kept(name string) replay.KeptFilter {
	if kf := r.e.keptFilter(r.e.bridges[name]); kf != nil {
		return kf
	}
	return nil
}
