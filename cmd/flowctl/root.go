package main

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/entry"
)

// globals are the flags every command shares.
type globals struct {
	server  string
	bridge  string
	timeout time.Duration
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "flowctl",
		Short:         "Declare and inspect the flows flowstated keeps on Open vSwitch bridges",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	def := os.Getenv("FLOWSTATE_SERVER")
	if def == "" {
		def = client.DefaultTarget
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", def, "flowstated address (env FLOWSTATE_SERVER)")
	pf.StringVar(&g.bridge, "bridge", "br-int", "bridge")
	pf.DurationVar(&g.timeout, "timeout", 60*time.Second, "timeout of each command")
	for _, k := range entry.Kinds {
		root.AddCommand(newAdd(g, k), newDel(g, k), newDump(g, k))
	}
	root.AddCommand(newReplaceFlows(g), newReady(g), newDiff(g), newReconcile(g), newWatch(g), newWait(g), newStatus(g))
	return root
}

func newClient(g *globals) (*client.Client, error) { return client.New(g.server) }

// run connects, bounds the command with --timeout, and runs fn.
func (g *globals) run(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
	c, err := newClient(g)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	defer cancel()
	return fn(ctx, c)
}
