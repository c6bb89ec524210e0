package replay

import (
	"log/slog"

	"github.com/flowstate-io/flowstate/server/restore/bridge"
)

// notePlaced records, durably (store.Placed), that b's entries are on the
// switch id names after a successful replay: the learning of a relayed
// controller (package owner) takes what the switch lacks as the
// controller's deletions only on that switch. id is the bridge's switch
// (Rooms.BridgeIdentity: the vswitchd and the bridge's incarnation in it)
// before the replay started, and nothing is recorded unless the same one
// still runs (a vswitchd started during the replay never got it, nor a
// bridge created again meanwhile). A failed write is logged: the record
// then names an older switch, and the learning takes no deletions from
// this one, the safe side.
func (rp *Replayer) notePlaced(b *bridge.State, id string, log *slog.Logger) {
	if id == "" || rp.cfg.Rooms.BridgeIdentity(b.Name()) != id {
		return
	}
	if err := rp.cfg.Store.Placed().SetVswitchd(b.Name(), id); err != nil {
		log.Warn("cannot record the switch the bridge's entries were replayed on: deletions of a controller relayed while flowstated is away will not be learned", "switch", id, "err", err)
	}
}
