package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
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
			c, ctx, done, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
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
	fmt.Fprintf(w, "ovsdb connected: %v, flow-restore-wait: %v\n\n", st.GetOvsdbConnected(), st.GetFlowRestoreWait())
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
	fmt.Fprintln(tw, "BRIDGE\tMODULE\tFLOWS\tGROUPS\tMETERS")
	for _, m := range st.GetModules() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", m.GetBridge(), m.GetName(), m.GetFlows(), m.GetGroups(), m.GetMeters())
	}
	return tw.Flush()
}
