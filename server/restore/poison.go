package restore

import (
	"context"
	"errors"
	"log/slog"

	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/poison"
)

// The crash-loop protection (package poison) wired to the engine. A
// bridge's tracker is guarded by its mu, which only this glue and the
// bridge's goroutine take around it; what the tracker holds out is
// quarantined with the predicted refusals (skipsLocked, quarantine.go).

// poisonConfig is what the trackers of the engine share.
func poisonConfig(cfg Config, ev *poison.Evidence) poison.Config {
	m := cfg.Metrics
	return poison.Config{Crashes: cfg.Store.Crashes(), Desired: cfg.Store.Entries(), Vswitchd: runDirVswitchd(cfg.RunDir), Evidence: ev,
		SurviveAfter: cfg.SurviveAfter, CrashWindow: cfg.CrashWindow,
		Metrics: poison.Metrics{Deaths: m.replayDeaths, Kills: m.replayKills, Survived: m.survived, Poisoned: m.poisoned, Suspects: m.suspects},
		Events:  cfg.Events, Logger: cfg.Logger}
}

// runDirVswitchd names the vswitchd whose pidfile is in the run directory
// (poison.Vswitchd).
type runDirVswitchd string

func (d runDirVswitchd) Identity() string { return ovsconfig.VswitchdIdentity(string(d)) }

// replayWatchLocked starts watching a replay of b begun at begun that sent
// something; a refusal by the switch is no connection lost.
func (b *managed) replayWatchLocked(begun poison.Begun, err error) {
	var re *plan.RejectedError
	b.Poison().Watch(begun, err != nil && !errors.As(err, &re))
}

// poisonHeldLocked returns, by key, the desired entries of b the replay
// leaves out for the crash-loop protection, as predicted refusals.
func (b *managed) poisonHeldLocked() (map[string]prediction, error) {
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

// connLost is called when b's OpenFlow connection ended while ctx is live:
// if the last replay failed on it and vswitchd died, the death is recorded.
func (e *Engine) connLost(ctx context.Context, b *managed, log *slog.Logger) {
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
