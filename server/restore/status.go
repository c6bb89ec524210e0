package restore

import (
	"github.com/flowstate-io/flowstate/server/restore/gate"
)

// Status returns the state of every managed bridge, in flag order.
func (e *Engine) Status() []BridgeStatus {
	out := make([]BridgeStatus, 0, len(e.order))
	for _, name := range e.order {
		b := e.bridges[name]
		st := BridgeStatus{Snapshot: b.Snapshot()}
		st.LeftAlone, st.LeftAloneAll = e.owners.KeptStatus(name)
		if st.QuarantinedTotal > 0 {
			qs, err := st.ListQuarantined(e.cfg.Store.Entries())
			if err != nil {
				e.log.Warn("status: reading the quarantined entries failed; they are counted, not listed", "bridge", name, "err", err)
			}
			st.Quarantined = qs
		}
		out = append(out, st)
	}
	return out
}

// Gate returns the state of the boot gate.
func (e *Engine) Gate() gate.Status { return e.gate.Status() }

// ModuleState is the readiness of one module.
type ModuleState struct {
	Required, Ready bool
}

// Modules returns the readiness of every module that is required or marked
// itself ready at some boot.
func (e *Engine) Modules() (map[string]ModuleState, error) {
	ready, err := e.cfg.Store.Modules().ReadyBoots()
	if err != nil {
		return nil, err
	}
	out := map[string]ModuleState{}
	for m, boot := range ready {
		out[m] = ModuleState{Ready: boot == e.cfg.BootID}
	}
	for _, m := range e.cfg.RequiredModules {
		st := out[m]
		st.Required = true
		out[m] = st
	}
	return out, nil
}
