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

func (r replayRooms) CheckOwner(name string) error { return r.e.owners.Check(name) }

// LearnRelayed makes the bridge's pending learning (owner.Learning) a write
// of its queue (write.Writes.Adopt).
func (r replayRooms) LearnRelayed(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) error {
	l := r.e.owners.Learning(b.Name(), conn, log)
	if l == nil {
		return nil
	}
	return r.e.writes.Adopt(ctx, b.Name(), l)
}

func (r replayRooms) RestoreTLVLocked(ctx context.Context, b *bridge.State, conn *ofconn.Conn, log *slog.Logger) error {
	return r.e.writes.RestoreTLVLocked(ctx, b, conn, log)
}

func (r replayRooms) Vswitchd() string { return r.e.vswitchd.Name() }

func (r replayRooms) BridgeIdentity(name string) string { return r.e.vswitchd.BridgeIdentity(name) }

func (r replayRooms) Kept(name string) replay.KeptFilter {
	if kf := r.e.owners.KeptFilter(name); kf != nil {
		return kf
	}
	return nil
}

// writeRooms is what the writes ask of the engine's other rooms
// (write.Rooms).
type writeRooms struct{ e *Engine }

func (r writeRooms) Vswitchd() string { return r.e.vswitchd.Name() }

func (r writeRooms) ControllerConnected(bridge, module string) {
	r.e.owners.ControllerConnected(bridge, module)
}

func (r writeRooms) Ready(module string) (bool, error) {
	mods, err := r.e.Modules()
	return mods[module].Ready, err
}
