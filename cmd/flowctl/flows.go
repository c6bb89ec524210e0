package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofctl"
)

// readFlows parses FILE or "-" locally first, so syntax errors name the line.
func readFlows(cmd *cobra.Command, name string) ([]ofctl.Flow, error) {
	var r io.Reader = cmd.InOrStdin()
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	flows, err := ofctl.ParseFlows(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(flows) == 0 {
		return nil, fmt.Errorf("%s: no flows", name)
	}
	return flows, nil
}

// lineError names the line of the file an entry error refers to.
func lineError(name string, flows []ofctl.Flow, err error) error {
	var ee *errdefs.EntryError
	if errors.As(err, &ee) && ee.Index >= 0 && ee.Index < len(flows) {
		f := flows[ee.Index]
		return fmt.Errorf("%s:%d: %q: %w", name, f.Line, f.Text, ee.Err)
	}
	return err
}

func newAddFlows(g *globals) *cobra.Command {
	var module string
	cmd := &cobra.Command{
		Use:   "add-flows --module M FILE|-",
		Short: "Add or replace flows of a module (one bundle; all or nothing)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			flows, err := readFlows(cmd, args[0])
			if err != nil {
				return err
			}
			es := make([]client.Entry, len(flows))
			for i, f := range flows {
				es[i] = client.FlowText(f.Text)
			}
			c, ctx, done, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			applied, err := c.Put(ctx, g.bridge, module, es...)
			if err != nil {
				return lineError(args[0], flows, err)
			}
			state := "applied"
			if !applied {
				state = "stored; the bridge is not connected, they will be applied by the next replay"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d flows %s\n", len(es), state)
			return nil
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that owns the flows (required)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

func newDelFlows(g *globals) *cobra.Command {
	var module string
	cmd := &cobra.Command{
		Use:   "del-flows --module M FILE|-",
		Short: "Delete flows of a module, named strictly by table, priority and match",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			// Without actions these are not add-flow lines: the server
			// parses them as identities and names the line on error.
			flows, err := readLines(r)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			es := make([]client.Entry, len(flows))
			for i, f := range flows {
				es[i] = client.FlowText(f.Text)
			}
			c, ctx, done, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if _, err := c.Delete(ctx, g.bridge, module, es...); err != nil {
				return lineError(args[0], flows, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d flows deleted\n", len(es))
			return nil
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "module that owns the flows (required)")
	_ = cmd.MarkFlagRequired("module")
	return cmd
}

func newDumpFlows(g *globals) *cobra.Command {
	var module string
	var table int
	cmd := &cobra.Command{
		Use:   "dump-flows [--module M] [--table N]",
		Short: "Print the desired flows of the bridge in ovs-ofctl syntax",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, done, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			f := client.Filter{Bridge: g.bridge, Module: module, Kind: 1}
			if table >= 0 {
				if table > 254 {
					return fmt.Errorf("--table %d: want 0-254", table)
				}
				t := uint8(table)
				f.Table = &t
			}
			es, err := c.List(ctx, f)
			if err != nil {
				return err
			}
			for _, e := range es {
				fmt.Fprintln(cmd.OutOrStdout(), e.Text)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&module, "module", "", "only flows of this module")
	cmd.Flags().IntVar(&table, "table", -1, "only flows of this table")
	return cmd
}

// readLines returns the non-blank, non-comment lines of r with their numbers.
func readLines(r io.Reader) ([]ofctl.Flow, error) {
	var out []ofctl.Flow
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		out = append(out, ofctl.Flow{Line: n, Text: text})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no flows")
	}
	return out, nil
}
