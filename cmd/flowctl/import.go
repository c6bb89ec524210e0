package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/ofconn"
)

// newImport is `flowctl import`: a controller that programmed the bridge
// itself hands its flows to a module without a gap, because the module
// declares what the switch already holds.
func newImport(g *globals) *cobra.Command {
	var module, rundir string
	cmd := &cobra.Command{
		Use:   "import --module M [FILE|-]",
		Short: "Take the flows a bridge holds, or an ovs-ofctl dump-flows file, into a module (all or nothing)",
		Long: `Declare, as entries of module M, the flows in flowstated's owned cookie space
(--owned-cookie) that the bridge holds now (read from <ovs-rundir>/<bridge>.mgmt,
with the groups and meters they use that no module declares), or that FILE
lists (the output of ovs-ofctl dump-flows: reply headers, counters and ages are
ignored). Flows outside the owned space are left out and counted. So are, and
named, the flows of the owned space that cannot be desired state: with an idle
or hard timeout (learned or expiring; flowstated leaves them alone), and with
send_flow_rem, check_overlap, reset_counts or a buffer_id (flowstated refuses
them: see the reason printed). Declare those without the flag, or they are
deleted when the bridge is adopted, like any undeclared flow of the owned space.

It is one request: all of it is stored or none, and an identity another module
owns fails the whole import, naming the owner. Importing again what a module
already declares changes nothing. When flowstated stands aside from the bridge
(it holds flows this store never declared), import every module, check
flowctl diff, then adopt the bridge as the reason in flowctl status says.`,
		Example: `  flowctl import --module pipeline                       # from the running br-int
  ovs-ofctl -O OpenFlow15 dump-flows br-int > flows.txt
  flowctl import --module pipeline flows.txt`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var lines []line
			if len(args) == 1 {
				var err error
				if lines, err = readInputSkipping(cmd, args[0], entry.KindFlow, isDumpHeader); err != nil {
					return err
				}
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return err
				}
				if err := managed(ctx, c, g.bridge); err != nil {
					return err
				}
				var im imported
				if len(args) == 1 {
					im, err = fromLines(args[0], lines, st.OwnedCookie)
				} else {
					im, err = fromBridge(ctx, c, filepath.Join(rundir, g.bridge+".mgmt"), g.bridge, st.OwnedCookie)
				}
				if err != nil {
					return err
				}
				if im.flows == 0 {
					im.report(cmd.ErrOrStderr())
					return fmt.Errorf("no flows to import in the owned cookie space %s%s", st.OwnedCookie, im.skipped())
				}
				applied, err := c.Put(ctx, client.Module{Bridge: g.bridge, Name: module}, im.entries...)
				if err != nil {
					if len(args) == 1 {
						return lineError(args[0], im.lines, err)
					}
					return err
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "imported %d flows, %d groups, %d meters into module %s%s\n", im.flows, im.groups, im.meters, module, im.skipped())
				im.report(out)
				if !applied {
					for _, b := range st.Bridges {
						if b.Name == g.bridge && b.Reason != "" {
							fmt.Fprintf(out, "bridge %s: %s\n", b.Name, b.Reason)
						}
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that takes the flows (required)")
	cmd.Flags().StringVar(&rundir, "ovs-rundir", "/var/run/openvswitch", "directory of ovs-vswitchd's <bridge>.mgmt sockets (without FILE)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

// imported is what an import declares, and what it left out.
type imported struct {
	entries               []client.Entry
	lines                 []line // for FILE: the line of each entry
	flows, groups, meters int
	foreign               int
	// notState holds the flows of the owned space that cannot be desired
	// state (entry.CheckDesiredFlow), by what they carry, in the order met.
	notState []leftOut
}

// leftOut is one kind of flow left out, with the flows that have it.
type leftOut struct {
	what  string // "timeouts", "send_flow_rem", ...
	why   string // CheckDesiredFlow's reason, of the first flow met
	flows []string
}

// maxNamed caps the flows named per kind left out: learned flows can be
// thousands.
const maxNamed = 20

func (im imported) skipped() string {
	var parts []string
	if im.foreign > 0 {
		parts = append(parts, fmt.Sprintf("%d outside the owned cookie space", im.foreign))
	}
	for _, l := range im.notState {
		parts = append(parts, fmt.Sprintf("%d with %s", len(l.flows), l.what))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (left out: " + strings.Join(parts, ", ") + ")"
}

// report names the flows of the owned space left out, and what becomes of
// them: flowstated does not delete a flow with a timeout (nobody's desired
// state), but deletes any other flow of the owned space that no module
// declares once the bridge is adopted.
func (im imported) report(w io.Writer) {
	for _, l := range im.notState {
		fmt.Fprintf(w, "left out, %d with %s: %s\n", len(l.flows), l.what, l.why)
		for i, f := range l.flows {
			if i == maxNamed {
				fmt.Fprintf(w, "  ... and %d more\n", len(l.flows)-maxNamed)
				break
			}
			fmt.Fprintf(w, "  %s\n", f)
		}
		if l.what == "timeouts" {
			fmt.Fprintln(w, "  flowstated leaves flows with timeouts on the switch (learned or expiring); nothing to do")
			continue
		}
		fmt.Fprintf(w, "  declare them without %s (the controller that owns them, or flowctl add-flows of these lines without it),\n", l.what)
		fmt.Fprintln(w, "  or they are deleted when the bridge is adopted: flowstated deletes the owned cookie space's undeclared flows")
	}
}

// notDesired says what makes a canonical FLOW_MOD not desired state, and
// why, or "" when it can be declared.
func notDesired(m []byte) (what, why string) {
	if idle, hard := entry.FlowModTimeouts(m); idle != 0 || hard != 0 {
		return "timeouts", "learned or expiring flows are not desired state"
	}
	err := entry.CheckDesiredFlow(m)
	if err == nil {
		return "", ""
	}
	why = err.Error()
	what, _, _ = strings.Cut(why, ":")
	what, _, _ = strings.Cut(what, "=") // buffer_id=N
	return what, why
}

// isDumpHeader matches the reply lines of ovs-ofctl dump-flows
// ("NXST_FLOW reply (xid=0x4):", "OFPST_FLOW reply (OF1.5) (xid=0x2):").
func isDumpHeader(s string) bool {
	return (strings.HasPrefix(s, "NXST_") || strings.HasPrefix(s, "OFPST_")) && strings.Contains(s, " reply")
}

// keep sorts a canonical FLOW_MOD into im: declared, or counted as left out
// (and, when in the owned space, named by name()).
func (im *imported) keep(m []byte, space entry.CookieSpace, name func() string) bool {
	if !space.Owns(entry.FlowCookie(m)) {
		im.foreign++
		return false
	}
	if what, why := notDesired(m); what != "" {
		i := slices.IndexFunc(im.notState, func(l leftOut) bool { return l.what == what })
		if i < 0 {
			i = len(im.notState)
			im.notState = append(im.notState, leftOut{what: what, why: why})
		}
		im.notState[i].flows = append(im.notState[i].flows, name())
		return false
	}
	im.flows++
	return true
}

func fromLines(name string, lines []line, space entry.CookieSpace) (imported, error) {
	var im imported
	for _, l := range lines {
		fm, err := ofctl.ParseFlow(l.text)
		if err != nil {
			return im, err // readInput checked every line
		}
		m, err := fm.MarshalBinary()
		if err != nil {
			return im, fmt.Errorf("line %d: encoding: %w", l.n, err)
		}
		if im.keep(m, space, func() string { return fmt.Sprintf("%s:%d: %s", name, l.n, l.text) }) {
			im.entries = append(im.entries, client.FlowText(l.text))
			im.lines = append(im.lines, l)
		}
	}
	return im, nil
}

// fromBridge reads the flows of the running bridge, and the groups and meters
// they use that no module declares.
func fromBridge(ctx context.Context, c *client.Client, sock, bridge string, space entry.CookieSpace) (imported, error) {
	var im imported
	conn, err := ofconn.Dial(ctx, sock, ofconn.Options{})
	if err != nil {
		return im, fmt.Errorf("reading bridge %s from ovs-vswitchd (--ovs-rundir): %w", bridge, err)
	}
	defer conn.Close()
	used := map[entry.Ref]bool{}
	err = conn.EachFlow(ctx, func(f ofconn.Flow) error {
		if f.Err != nil {
			return f.Err
		}
		m, err := f.FlowMod()
		if err != nil {
			return err
		}
		m = canon.FromSwitch(m)
		name := func() string {
			if s, err := ofctl.FormatFlowMod(m); err == nil {
				return s
			}
			return fmt.Sprintf("(a flow of cookie %#x that ofctl cannot print)", entry.FlowCookie(m))
		}
		if im.keep(m, space, name) {
			im.entries = append(im.entries, client.FlowBytes(m))
			for _, r := range entry.FlowRefs(m) {
				used[r] = true
			}
		}
		return nil
	})
	if err != nil || len(used) == 0 {
		return im, err
	}
	declared := map[entry.Ref]bool{}
	for _, k := range []entry.Kind{entry.KindGroup, entry.KindMeter} {
		es, err := c.List(ctx, client.Filter{Bridge: bridge, Kind: k})
		if err != nil {
			return im, err
		}
		for _, e := range es {
			if r, ok := entry.ModRef(k, e.OpenFlow); ok {
				declared[r] = true
			}
		}
	}
	wanted := func(k entry.Kind, id uint32) bool {
		r := entry.Ref{Kind: k, ID: id}
		return used[r] && !declared[r]
	}
	groups, err := conn.DumpGroups(ctx)
	if err != nil {
		return im, err
	}
	for _, gr := range groups {
		if !wanted(entry.KindGroup, gr.ID()) {
			continue
		}
		m, err := gr.GroupMod()
		if err != nil {
			return im, err
		}
		im.entries = append(im.entries, client.Entry{Kind: entry.KindGroup, OpenFlow: m})
		im.groups++
	}
	meters, err := conn.DumpMeters(ctx)
	if err != nil {
		return im, err
	}
	for _, mt := range meters {
		if !wanted(entry.KindMeter, mt.ID()) {
			continue
		}
		m, err := mt.MeterMod()
		if err != nil {
			return im, err
		}
		im.entries = append(im.entries, client.Entry{Kind: entry.KindMeter, OpenFlow: m})
		im.meters++
	}
	return im, nil
}
