package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/client"
)

func newStatus(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status [-o text|json]",
		Short: "Show bridges, modules and the flow-restore-wait flag",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			return g.run(cmd, func(ctx context.Context, c *client.Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return err
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

func printStatus(w io.Writer, st *flowstatev1.StatusResponse) error {
	start := "warm"
	if st.GetColdStart() {
		start = "cold"
	}
	fmt.Fprintf(w, "boot id %s (%s start)\n", st.GetBootId(), start)
	fmt.Fprintf(w, "ovsdb connected: %v, flow-restore-wait: %v, read by vswitchd: %v\n", st.GetOvsdbConnected(), st.GetFlowRestoreWait(), st.GetVswitchdAcknowledged())
	if g := st.GetGate(); g.GetOpen() {
		fmt.Fprintf(w, "gate open: %s\n\n", g.GetReason())
	} else {
		fmt.Fprintf(w, "gate CLOSED: waiting for modules %s\n\n", strings.Join(g.GetWaitingFor(), ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BRIDGE\tCONNECTED\tCONVERGED\tFLOWS\tLAST REPLAY\tMESSAGES\tDURATION\tERROR")
	for _, b := range st.GetBridges() {
		r := b.GetLastReplay()
		last, dur := "-", "-"
		if r != nil {
			last = r.GetFinishedAt().AsTime().Local().Format("15:04:05")
			dur = r.GetDuration().AsDuration().String()
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%d\t%s\t%d\t%s\t%s\n", b.GetName(), b.GetConnected(), b.GetConverged(),
			b.GetFlows(), last, r.GetMessages(), dur, r.GetError())
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
	if q := st.GetQuarantined(); len(q) > 0 {
		fmt.Fprintf(w, "\n%d QUARANTINED (refused by ovs-vswitchd, left out of replays):\n", len(q))
		for _, e := range q {
			fmt.Fprintf(w, "  %s %s %s: %s\n    %s\n", e.GetEntry().GetBridge(), e.GetEntry().GetModule(),
				e.GetEntry().GetKind(), e.GetError(), e.GetEntry().GetText())
		}
	}
	return nil
}
