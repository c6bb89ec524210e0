package restore

import (
	"github.com/flowstate-io/flowstate/server/restore/poison"
)

// The crash-loop protection (package poison) wired to the engine. A
// bridge's tracker is guarded by the bridge's lock (package bridge); what
// it holds out, the replay quarantines with the predicted refusals (package
// replay).

// poisonConfig is what the trackers of the engine share.
func poisonConfig(cfg Config, ev *poison.Evidence, vs poison.Vswitchd) poison.Config {
	m := cfg.Metrics
	return poison.Config{Crashes: cfg.Store.Crashes(), Desired: cfg.Store.Entries(), Vswitchd: vs, Evidence: ev,
		SurviveAfter: cfg.SurviveAfter, CrashWindow: cfg.CrashWindow,
		Metrics: poison.Metrics{Deaths: m.replayDeaths, Kills: m.replayKills, Survived: m.survived, Poisoned: m.poisoned, Suspects: m.suspects},
		Events:  cfg.Events, Logger: cfg.Logger}
}
