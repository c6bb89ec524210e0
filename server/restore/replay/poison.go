package replay

import (
	"context"
	"errors"
	"log/slog"

	"github.com/flowstate-io/flowstate/server/restore/bridge"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/poison"
)

// replayWatchLocked starts watching a replay of b begun at begun that sent
// something; a refusal by the switch is no connection lost.
func replayWatchLocked(b *bridge.State, begun poison.Begun, err error) {
	var re *plan.RejectedError
	b.Poison().Watch(begun, err != nil && !errors.As(err, &re))
}

// poisonHeldLocked returns, by key, the desired entries of b the replay
// leaves out for the crash-loop protection, as predicted refusals.
func poisonHeldLocked(b *bridge.State) (map[string]prediction, error) {
	held, err := b.Poison().Held()
	if err != nil || len(held) == 0 {
		return nil, err
	}
	out := make(map[string]prediction, len(held))
	for k, h := range held {
		out[k] = prediction{kind: h.Kind, module: h.Module, reason: h.Reason}
	}
	return out, nil
}

// ConnLost is called when b's OpenFlow connection ended while ctx is live:
// if the last replay failed on it and vswitchd died, the death is recorded.
func (rp *Replayer) ConnLost(ctx context.Context, b *bridge.State, log *slog.Logger) {
	b.Lock()
	w := b.Poison().TakeWatch()
	b.Unlock()
	d, ok := b.Poison().Death(ctx, w, log)
	if !ok {
		return
	}
	b.Lock()
	defer b.Unlock()
	if err := b.Poison().RecordDeath(d, b.Quarantine().Has, log); err != nil {
		log.Error("recording the death of vswitchd during a replay failed", "err", err)
	}
}
