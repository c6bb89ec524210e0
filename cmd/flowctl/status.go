package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs/errgrpc"
	"github.com/flowstate-io/flowstate/internal/version"
)

// clientVersion is this flowctl's build, shown beside the server's.
var clientVersion = version.Get()

func newStatus(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status [-o text|json]",
		Short: "Show bridges, modules and the flow-restore-wait flag",
		Example: `  flowctl status
  flowctl status -o json | jq '.bridges[] | {name, converged, reason}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usagef("-o %q: want text or json", output)
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				// The wire form: -o json prints it as protojson.
				st, err := flowstatev1.NewFlowStateServiceClient(c.Conn()).Status(ctx, &flowstatev1.StatusRequest{})
				if err != nil {
					return errgrpc.ToNative(err)
				}
				if output == "json" {
					b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(st)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
					return err
				}
				return printStatus(cmd.OutOrStdout(), st)
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// stamp renders t in RFC 3339 with its age, or, for a time to come, how
// far off it is.
func stamp(t time.Time) string {
	if d := time.Until(t).Round(time.Second); d > 0 {
		return fmt.Sprintf("%s (in %v)", t.Local().Format(time.RFC3339), d)
	}
	return fmt.Sprintf("%s (%v ago)", t.Local().Format(time.RFC3339), time.Since(t).Round(time.Second))
}

// buildLine renders a build as --version does, without the Go version.
func buildLine(prog, v, commit string) string {
	if v == "" {
		v = "devel"
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s)", prog, v, commit)
}

// flagLine says what flow-restore-wait means for the running vswitchd: a
// flag set under a vswitchd that was released (the re-armed flag of steady
// state, or right after flowctl release) holds nothing now, it is armed for
// the next start.
func flagLine(st *flowstatev1.StatusResponse) string {
	if !st.GetOvsdbConnected() {
		return "ovsdb NOT CONNECTED: flow-restore-wait and ovs-vswitchd unknown"
	}
	var vs string
	switch {
	case !st.GetVswitchdRunning():
		vs = "ovs-vswitchd NOT RUNNING"
	case st.GetVswitchdAcknowledged():
		vs = "ovs-vswitchd running, read by vswitchd: true"
	default:
		vs = "ovs-vswitchd running, read by vswitchd: false (it has not read the latest change yet)"
	}
	var flag string
	switch {
	case !st.GetFlowRestoreWait():
		flag = "flow-restore-wait: cleared"
	case st.GetVswitchdHeld():
		flag = "flow-restore-wait: set, HOLDING ovs-vswitchd (no new flows forward until flowstated restores every bridge and releases it)"
	default:
		flag = "flow-restore-wait: armed for the next vswitchd start"
	}
	return "ovsdb connected; " + vs + "; " + flag
}

// vswitchdLine names the running vswitchd's version: as it reports it over
// OpenFlow, and OVSDB's ovs_version (written by ovs-ctl) when that differs.
func vswitchdLine(b *flowstatev1.VswitchdBuild) string {
	v, db := b.GetVersion(), b.GetOvsdbVersion()
	switch {
	case v == "" && db == "":
		return "ovs-vswitchd version: unknown (no bridge answered yet)"
	case v == "":
		return fmt.Sprintf("ovs-vswitchd version: %s (OVSDB ovs_version; no bridge answered yet)", db)
	case db != "" && db != v:
		return fmt.Sprintf("ovs-vswitchd version: %s (OVSDB ovs_version: %s, written when ovs-ctl last started it)", v, db)
	}
	return "ovs-vswitchd version: " + v
}

// ovnLine names the node's ovn-controller: its version and what it was
// built with (the rest of its `version` answer), or why there is none.
func ovnLine(o *flowstatev1.OvnController) string {
	if o.GetVersion() == "" {
		if o.GetReason() == "" { // a flowstated from before the field
			return "ovn-controller: unknown (not reported by this flowstated)"
		}
		return "ovn-controller: " + o.GetReason()
	}
	var built []string
	for i, l := range strings.Split(o.GetReply(), "\n") {
		if l = strings.TrimSpace(l); i > 0 && l != "" {
			built = append(built, l)
		}
	}
	if len(built) == 0 {
		return "ovn-controller: " + o.GetVersion()
	}
	return fmt.Sprintf("ovn-controller: %s (%s)", o.GetVersion(), strings.Join(built, ", "))
}

func printStatus(w io.Writer, st *flowstatev1.StatusResponse) error {
	start := "warm"
	if st.GetColdStart() {
		start = "cold"
	}
	fmt.Fprintf(w, "server %s; client %s\n", buildLine("flowstated", st.GetVersion(), st.GetCommit()),
		buildLine("flowctl", clientVersion.Version, clientVersion.Commit))
	fmt.Fprintf(w, "boot id %s (%s start)\n", st.GetBootId(), start)
	fmt.Fprintln(w, flagLine(st))
	fmt.Fprintln(w, vswitchdLine(st.GetVswitchdBuild()))
	for _, l := range st.GetVswitchdBuild().GetLimits() {
		fmt.Fprintf(w, "  ovs-vswitchd LIMIT: %s\n", l)
	}
	fmt.Fprintln(w, ovnLine(st.GetOvnController()))
	if t := st.GetLastRelease(); t != nil {
		fmt.Fprintf(w, "last release of ovs-vswitchd: %s\n", stamp(t.AsTime()))
	} else {
		fmt.Fprintln(w, "last release of ovs-vswitchd: never (by flowstated with this store)")
	}
	if g := st.GetGate(); g.GetOpen() {
		fmt.Fprintf(w, "gate open: %s\n", g.GetReason())
	} else {
		fmt.Fprintf(w, "gate CLOSED: waiting for modules %s", strings.Join(g.GetWaitingFor(), ", "))
		if d := g.GetDeadline(); d != nil {
			fmt.Fprintf(w, "; readiness timeout %s", stamp(d.AsTime()))
		}
		fmt.Fprintln(w)
	}
	switch gd := st.GetGuard(); {
	case gd.GetMode() == "off":
		fmt.Fprintln(w, "guard: off (a dead flowstated would leave flow-restore-wait set)")
	case gd.GetProven():
		fmt.Fprintf(w, "guard: %s, proven (pid %d, OVSDB reached %s ago); releases the node %v after flowstated stops renewing %s\n", gd.GetMode(),
			gd.GetPid(), time.Since(gd.GetLastRoundTrip().AsTime()).Round(time.Millisecond), gd.GetGuardGrace().AsDuration(), gd.GetLease())
	case gd.GetRunning():
		fmt.Fprintf(w, "guard: %s, running but NOT PROVEN (%s: %s): flow-restore-wait stays disarmed until it is\n", gd.GetMode(),
			gd.GetUnprovenField(), gd.GetReason())
	default:
		fmt.Fprintf(w, "guard: %s, NOT RUNNING: flow-restore-wait stays disarmed until a guard holds %s.lock\n", gd.GetMode(), gd.GetLease())
	}
	if wd := st.GetWedged(); wd != "" {
		fmt.Fprintf(w, "ENGINE WEDGED: %s (health NOT_SERVING, guard lease not renewed)\n", wd)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BRIDGE\tCONNECTED\tCONVERGED\tSINCE\tFLOWS\tLAST REPLAY\tMESSAGES\tDURATION\tERROR")
	for _, b := range st.GetBridges() {
		r := b.GetLastReplay()
		last, dur, since := "-", "-", "-"
		if r != nil {
			last = stamp(r.GetFinishedAt().AsTime())
			dur = r.GetDuration().AsDuration().String()
		}
		if b.GetSince() != nil {
			since = stamp(b.GetSince().AsTime())
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%s\t%d\t%s\t%d\t%s\t%s\n", b.GetName(), b.GetConnected(), b.GetConverged(), since,
			b.GetFlows(), last, r.GetMessages(), dur, r.GetError())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range st.GetBridges() {
		// An excuse may carry the reason (--max-hold); each is printed once.
		if r := b.GetReason(); r != "" && !strings.Contains(b.GetExcused(), r) {
			fmt.Fprintf(w, "  %s not converged: %s\n", b.GetName(), r)
		}
		if b.GetExcused() != "" {
			fmt.Fprintf(w, "  %s NOT RESTORED, node released without it: %s\n", b.GetName(), b.GetExcused())
		}
		switch {
		case b.GetLeftAloneAll():
			fmt.Fprintf(w, "  %s: every undeclared entry left alone, not restored: controllers relayed by the OpenFlow proxy without recording (not OpenFlow 1.5) installed more than flowstated tracks\n", b.GetName())
		case b.GetLeftAlone() > 0:
			fmt.Fprintf(w, "  %s: %d entries left alone, not restored after a vswitchd restart: installed by a controller the OpenFlow proxy relays without recording (not OpenFlow 1.5)\n", b.GetName(), b.GetLeftAlone())
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "BRIDGE\tMODULE\tFLOWS\tGROUPS\tMETERS\tREQUIRED\tREADY")
	for _, m := range st.GetModules() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%v\t%v\n", m.GetBridge(), m.GetName(), m.GetFlows(), m.GetGroups(), m.GetMeters(),
			m.GetRequired(), m.GetReady())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ss := st.GetSessions(); len(ss) > 0 {
		// A controller that froze stays listed until the keepalive drops
		// it (about 15 s); an old LAST CALL on a writer is the hint.
		fmt.Fprintf(tw, "\nCLIENT UID\tGID\tPID\tMODULES\tCONNECTED\tLAST CALL\tCALLS\n")
		for _, c := range ss {
			mods := strings.Join(c.GetModules(), ",")
			if mods == "" {
				mods = "-"
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%d\n", c.GetUid(), c.GetGid(), c.GetPid(), mods,
				stamp(c.GetSince().AsTime()), stamp(c.GetLastActivity().AsTime()), c.GetCalls())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if ps := st.GetProxies(); len(ps) > 0 {
		// A proxied module's entries are in the module table above; this
		// says whether its controller is there and how its installs went.
		fmt.Fprintf(tw, "\nPROXY BRIDGE\tMODULE\tSOCKET\tCONNECTIONS\tRECORDED\tLAST INSTALL\tLAST ERROR\n")
		for _, p := range ps {
			last, lastErr := "never", "-"
			if p.GetLastInstall() != nil {
				last = stamp(p.GetLastInstall().AsTime())
			}
			if p.GetLastError() != "" {
				lastErr = p.GetLastError() + " (" + stamp(p.GetLastErrorTime().AsTime()) + ")"
			}
			sock := p.GetSocket()
			if t := p.GetTcpListen(); t != "" {
				sock += ",tcp:" + t
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", p.GetBridge(), p.GetModule(), sock,
				p.GetConnections(), p.GetRecordedMessages(), last, lastErr)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if q := st.GetQuarantined(); len(q) > 0 {
		fmt.Fprintf(w, "\n%d QUARANTINED (refused by ovs-vswitchd, left out of replays):\n", len(q))
		for _, e := range q {
			fmt.Fprintf(w, "  %s %s %s: %s\n    %s\n", e.GetEntry().GetBridge(), e.GetEntry().GetModule(),
				e.GetEntry().GetKind(), e.GetError(), e.GetEntry().GetText())
		}
	}
	return nil
}
