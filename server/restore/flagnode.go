package restore

import (
	"time"

	"github.com/flowstate-io/flowstate/server/ovsconfig"
	"github.com/flowstate-io/flowstate/server/restore/flag"
)

// flagNode is what package flag reads of the engine (flag.Node): the
// managed bridges, the gate, the mirrors and whether the engine is wedged.
type flagNode struct{ e *Engine }

func (n flagNode) Bridges() []flag.Bridge {
	out := make([]flag.Bridge, 0, len(n.e.order))
	for _, name := range n.e.order {
		b := n.e.bridges[name]
		st := b.Snapshot()
		out = append(out, flag.Bridge{Name: name, Connected: st.Connected, Converged: st.Converged,
			Since: st.Since, Reason: st.Reason, Excused: st.Excused, StandingAside: n.e.owners.StandingAside(name)})
	}
	return out
}

func (n flagNode) Excuse(bridge, why string) bool { return n.e.bridges[bridge].Excuse(why) }

func (n flagNode) GateOpened() time.Time { return n.e.gate.OpenedAt() }

func (n flagNode) MirrorsSettled(c *ovsconfig.Client) bool { return n.e.mirrors.Settled(c) }

func (n flagNode) Wedged() string { return n.e.Wedged() }
