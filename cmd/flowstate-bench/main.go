package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	flows         []int         // flow counts, one sandbox each
	runs          int           // runs of each measurement
	batch         int           // flows per Put of the Go client
	writers       int           // concurrent Go client writers
	declareMax    time.Duration // a declare that takes longer is stopped
	timeout       time.Duration // bound of the whole command
	keep          bool          // keep the sandbox directories (logs)
	cpuProf       string        // prefix of flowstated's CPU profiles
	flowstatedBin string        // flowstated to run (empty: go build)
	flowctlBin    string        // flowctl to run (empty: go build)
	verbose       bool          // progress details to stderr
}

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "flowstate-bench:", err)
		os.Exit(2)
	}
	// Signal handling first: Ctrl-C cancels ctx, every step returns, and the
	// deferred cleanups stop flowstated and the sandbox.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()

	cmdline := commandLine(os.Args)
	if err := run(ctx, opts, cmdline, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "flowstate-bench:", err)
		cancel()
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	fs := flag.NewFlagSet("flowstate-bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var o options
	flows := fs.String("flows", "200000", "flow counts, comma-separated (e.g. 200000,1000000; a k or M suffix means thousands or millions)")
	fs.IntVar(&o.runs, "runs", 3, "runs of each measurement (median, min and max are printed)")
	fs.IntVar(&o.batch, "batch", 1000, "flows per Put of the Go client in the declare measurement")
	fs.IntVar(&o.writers, "writers", 8, "concurrent Go client writers in the declare measurement")
	fs.DurationVar(&o.declareMax, "declare-timeout", 5*time.Minute, "stop a declare (flowctl or Go client) that takes longer, and report it as taking more")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Minute, "bound of the whole run")
	fs.BoolVar(&o.keep, "keep", false, "keep the sandbox directories (vswitchd and flowstated logs)")
	fs.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of each flowstated process to `prefix`.FLOWS.NN-PHASE.pprof (flowstated --cpuprofile)")
	fs.StringVar(&o.flowstatedBin, "flowstated", "", "flowstated binary to run (default: go build ./cmd/flowstated)")
	fs.StringVar(&o.flowctlBin, "flowctl", "", "flowctl binary to run (default: go build ./cmd/flowctl)")
	fs.BoolVar(&o.verbose, "v", false, "log progress details to stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: flowstate-bench [flags]\n\nCompares flowstated with ovs-ofctl --bundle on a private OVS sandbox; see docs/benchmarks.md.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.flows, err = parseCounts(*flows); err != nil {
		return o, err
	}
	if o.runs < 1 {
		return o, fmt.Errorf("-runs %d: want at least 1", o.runs)
	}
	if o.batch < 1 {
		return o, fmt.Errorf("-batch %d: want at least 1", o.batch)
	}
	if o.writers < 1 {
		return o, fmt.Errorf("-writers %d: want at least 1", o.writers)
	}
	if o.declareMax <= 0 {
		return o, fmt.Errorf("-declare-timeout %v: want a positive duration", o.declareMax)
	}
	if o.timeout <= 0 {
		return o, fmt.Errorf("-timeout %v: want a positive duration", o.timeout)
	}
	return o, nil
}

// parseCounts reads "200000,1M" or "10000,50k".
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		mult := 1
		if t, ok := strings.CutSuffix(f, "k"); ok {
			f, mult = t, 1000
		} else if t, ok := strings.CutSuffix(f, "m"); ok {
			f, mult = t, 1000000
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-flows: %q is not a positive count", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// commandLine quotes argv for copy and paste.
func commandLine(argv []string) string {
	parts := []string{filepath.Base(argv[0])}
	for _, a := range argv[1:] {
		if a == "" || strings.ContainsAny(a, " \t\"'$\\") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// run measures every flow count and prints the report to out; progress goes
// to progress.
func run(ctx context.Context, o options, cmdline string, out, progress io.Writer) error {
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	plog := slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: level}))
	m, err := describeMachine(ctx)
	if err != nil {
		return err
	}
	binDir, err := os.MkdirTemp("", "flowstate-bench")
	if err != nil {
		return fmt.Errorf("binaries: %w", err)
	}
	defer os.RemoveAll(binDir)
	bins, err := buildBinaries(ctx, o, binDir)
	if err != nil {
		return err
	}
	if o.cpuProf != "" {
		if o.cpuProf, err = filepath.Abs(o.cpuProf); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	start, cpuStart := time.Now(), readMachineCPU()
	var results []*result
	for _, n := range o.flows {
		r, err := measure(ctx, o, bins, n, plog)
		if err != nil {
			return fmt.Errorf("%d flows: %w", n, err)
		}
		results = append(results, r)
	}
	// Every sandbox is closed and waited for, so the children's CPU now
	// includes vswitchd's and ovsdb-server's.
	m.other, m.steal, m.otherOK = others(cpuStart, readMachineCPU())
	report(out, cmdline, m, o, results, time.Since(start))
	return nil
}
