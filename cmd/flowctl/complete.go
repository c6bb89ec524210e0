package main

import (
	"context"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
)

// completionTimeout bounds the Status call behind a completion: a shell
// must not hang on a frozen flowstated.
const completionTimeout = 2 * time.Second

// registerCompletions completes --bridge with the managed bridges, --module
// with the modules flowstated knows, and -o with the output formats, on
// every command that has them.
func registerCompletions(root *cobra.Command, g *globals) {
	_ = root.RegisterFlagCompletionFunc("bridge", g.completeFromStatus(func(st *client.Status) []string {
		var out []string
		for _, b := range st.Bridges {
			out = append(out, b.Name)
		}
		return out
	}))
	modules := g.completeFromStatus(func(st *client.Status) []string {
		var out []string
		for _, m := range st.Modules {
			if !slices.Contains(out, m.Name) {
				out = append(out, m.Name)
			}
		}
		return out
	})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("module") != nil {
			_ = c.RegisterFlagCompletionFunc("module", modules)
		}
		if c.Flags().Lookup("output") != nil {
			_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeFromStatus completes with names taken from flowstated's Status;
// when flowstated does not answer in time it offers nothing.
func (g *globals) completeFromStatus(names func(*client.Status) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		c, err := client.New(target(g.server))
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer c.Close()
		ctx := cmd.Context()
		if ctx == nil { // Execute without a context
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, completionTimeout)
		defer cancel()
		st, err := c.Status(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names(st), cobra.ShellCompDirectiveNoFileComp
	}
}
