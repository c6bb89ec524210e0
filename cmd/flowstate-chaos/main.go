// Command flowstate-chaos runs seeded, randomized fault schedules against
// flowstated, its guard and a private Open vSwitch sandbox, and checks
// flowstate's promises (package internal/chaos; docs/testing.md).
//
//	flowstate-chaos -seed 7 -steps 20          # one seed
//	flowstate-chaos -duration 30m              # fresh seeds until 30 minutes passed
//	flowstate-chaos -seed 7 -schedule 'guard-kill:300:900,vswitchd-kill:500:400'
//	flowstate-chaos -seed 7 -steps 20 -shrink  # a failing run, cut to its shortest failing schedule
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/internal/chaos"
)

func main() {
	chaos.MaybeChild() // the foreign writer of foreign-writes
	os.Exit(run())
}

func run() int {
	var (
		seed     = flag.Uint64("seed", 0, "seed of the schedule and the writers (0: a fresh seed per run)")
		steps    = flag.Int("steps", 20, "faults per run")
		duration = flag.Duration("duration", 0, "run fresh seeds until this much time has passed (0: one run)")
		schedule = flag.String("schedule", "", "run this schedule (kind:pause_ms:hold_ms[@replay+ms|@resync+ms|@restore+ms|@quiet+ms], steps of a cluster joined by +, clusters by ,) instead of drawing one")
		faults   = flag.String("faults", "", "comma-separated fault kinds to draw from (default all: "+kinds()+")")
		shrink   = flag.Bool("shrink", false, "when a run fails, look for the shortest schedule that still fails")
		bin      = flag.String("flowstated", "", "flowstated binary (default: built from this module)")
		settle   = flag.Duration("settle", 60*time.Second, "how long the node may take to come to rest once the faults end")
		verbose  = flag.Bool("v", false, "log the harness's progress")
		covFile  = flag.String("coverage", "", "keep the coverage of kinds, pairs and triples in this file: read at the start, written after each run")
		relay    = flag.Bool("relay", true, "run flowstated with the guard's relay of its OpenFlow proxy socket (--openflow-proxy-relay)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if *bin == "" {
		dir, err := os.MkdirTemp("", "chaos-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if *bin, err = chaos.BuildFlowstated(ctx, dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	cfg := chaos.Config{Steps: *steps, Flowstated: *bin, Logger: log, Settle: *settle, NoRelay: !*relay}
	if *faults != "" {
		for _, k := range strings.Split(*faults, ",") {
			cfg.Faults = append(cfg.Faults, chaos.FaultKind(strings.TrimSpace(k)))
		}
	}
	if *schedule != "" {
		s, err := chaos.ParseSchedule(*schedule)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		cfg.Schedule = s
	}
	// One Coverage across the runs: each drawn schedule is weighted toward
	// the kinds, ordered pairs and triples not run yet.
	cov := chaos.NewCoverage()
	if *covFile != "" {
		var err error
		if cov, err = chaos.LoadCoverage(*covFile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	if cfg.Schedule == nil {
		cfg.Coverage = cov
	}
	end := time.Now().Add(*duration)
	failed := 0
	for runs := 0; ; runs++ {
		cfg.Seed = *seed
		if cfg.Seed == 0 {
			cfg.Seed = rand.Uint64N(1 << 32)
		}
		rep, err := chaos.Run(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		rep.Print(os.Stdout)
		cov.Add(rep.Schedule, rep.Ran)
		if *covFile != "" {
			if err := cov.Save(*covFile); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
		if rep.Failed() {
			failed++
			if *verbose {
				fmt.Println(rep.Logs)
			}
			if *shrink {
				short := chaos.Shrink(rep.Schedule, func(s chaos.Schedule) bool {
					c := cfg
					c.Schedule = s
					r, err := chaos.Run(ctx, c)
					fmt.Printf("shrink: %d steps: failed=%v\n", len(s), err == nil && r.Failed())
					return err == nil && r.Failed()
				})
				fmt.Printf("shortest failing schedule (%d steps): -seed %d -schedule %q\n%s", len(short), cfg.Seed, short.Encode(), short)
			}
		}
		if ctx.Err() != nil || *duration == 0 || time.Now().After(end) {
			fmt.Printf("%d runs, %d failed; coverage: %s\n", runs+1, failed, cov.Summary(cfg.Faults))
			break
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func kinds() string {
	s := make([]string, len(chaos.AllFaults))
	for i, k := range chaos.AllFaults {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}
