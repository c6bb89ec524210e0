package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/store/storetest"
)

// Small writes (issue 35): a CNI waits for one Put a pod. These benchmarks
// print each goal's figure beside the fsync floor measured in the same run,
// rounds of the floor and of the Puts interleaved, so that a loaded machine
// slows both sides of a ratio alike. Timing is never asserted.
//
//	go test -run '^$' -bench 'SmallPut' -benchtime 2000x -count 1 ./server/

// smallRounds is how many times each benchmark alternates floor and Puts.
const smallRounds = 3

// smallEnv is a flowstated managing a converged br-int whose log goes to a
// file at Info, as a production flowstated's goes to its journal.
func smallEnv(ctx context.Context, b *testing.B) *testenv.Env {
	b.Helper()
	te := testenv.New(ctx, b, testenv.LogToFile())
	te.Start(ctx)
	te.WaitConverged(ctx)
	return te
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

func reportRatios(b *testing.B, put, fl []time.Duration) {
	b.Helper()
	pp50, pp99 := quantile(put, 0.50), quantile(put, 0.99)
	fp50, fp99 := quantile(fl, 0.50), quantile(fl, 0.99)
	b.ReportMetric(float64(pp50.Microseconds()), "put-p50-µs")
	b.ReportMetric(float64(pp99.Microseconds()), "put-p99-µs")
	b.ReportMetric(float64(fp50.Microseconds()), "floor-p50-µs")
	b.ReportMetric(float64(fp99.Microseconds()), "floor-p99-µs")
	b.ReportMetric(float64(pp50)/float64(fp50), "p50/floor")
	b.ReportMetric(float64(pp99)/float64(fp99), "p99/floor-p99")
	b.ReportMetric(float64(mean(put))/float64(mean(fl)), "mean/floor-mean")
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// smallFlow is the i-th flow of writer w: one exact match, one action.
func smallFlow(w, i int) client.Entry {
	return client.FlowText(fmt.Sprintf("table=1,priority=100,ip,nw_src=10.%d.%d.%d,actions=output:2", w, i>>8&0xff, i&0xff))
}

// BenchmarkSmallPutSequential: one writer, one new flow a Put, each Put
// waited for (goal: p50 at most 2× the floor's p50, p99 at most 3× its p99).
func BenchmarkSmallPutSequential(b *testing.B) {
	sequentialPuts(b, func(n int) client.Entry { return smallFlow(0, n) })
}

// sequentialPuts alternates smallRounds of b.N floor Updates with b.N Puts
// of one writer, the n-th Putting flow(n), each waited for, and reports the
// Puts beside the floor. flow(0) is Put once before, untimed.
func sequentialPuts(b *testing.B, flow func(n int) client.Entry) {
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
	defer cancel()
	te := smallEnv(ctx, b)
	fl := storetest.OpenFloor(b, te.Sandbox.Dir())
	m := client.Module{Bridge: "br-int", Name: "cni"}
	if _, err := te.Client.Put(ctx, m, flow(0)); err != nil {
		b.Fatal(err)
	}
	var puts, floors []time.Duration
	n := 1
	b.ResetTimer()
	for range smallRounds {
		floors = append(floors, fl.Updates(b.N)...)
		for range b.N {
			start := time.Now()
			if _, err := te.Client.Put(ctx, m, flow(n)); err != nil {
				b.Fatal(err)
			}
			puts = append(puts, time.Since(start))
			n++
		}
	}
	b.StopTimer()
	reportRatios(b, puts, floors)
}

// BenchmarkSmallPutConcurrent: 8 writers, each on its own module, one new
// flow a Put (goal: at least 2,000 Puts/s, p99 at most 5× the floor's p99).
// The floor's rounds run alone, one Update after the other.
func BenchmarkSmallPutConcurrent(b *testing.B) {
	const writers = 8
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
	defer cancel()
	te := smallEnv(ctx, b)
	fl := storetest.OpenFloor(b, te.Sandbox.Dir())
	var (
		floors, puts []time.Duration
		busy         time.Duration
		next         = make([]int, writers)
	)
	b.ResetTimer()
	for range smallRounds {
		floors = append(floors, fl.Updates(b.N)...)
		lat := make([][]time.Duration, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		start := time.Now()
		for w := range writers {
			m := client.Module{Bridge: "br-int", Name: fmt.Sprintf("pod-%d", w)}
			wg.Go(func() {
				for i := w; i < b.N; i += writers {
					t0 := time.Now()
					if _, err := te.Client.Put(ctx, m, smallFlow(w, next[w])); err != nil {
						errs[w] = err
						return
					}
					lat[w] = append(lat[w], time.Since(t0))
					next[w]++
				}
			})
		}
		wg.Wait()
		busy += time.Since(start)
		for w, err := range errs {
			if err != nil {
				b.Fatalf("writer %d: %v", w, err)
			}
		}
		puts = append(puts, slices.Concat(lat...)...)
	}
	b.StopTimer()
	// The floor's rate is what one writer gets; above it, Puts share fsyncs.
	b.ReportMetric(float64(len(puts))/busy.Seconds(), "puts/s")
	b.ReportMetric(1/mean(floors).Seconds(), "floor-updates/s")
	reportRatios(b, puts, floors)
}

// BenchmarkSmallPutUnchanged: one writer Putting the same flow again, each Put
// waited for: nothing changes, so no bundle and no store commit, and what
// it costs is a small Put's fixed part (gRPC, the interceptors, the
// canonical form, the write queue and its hand-offs, the plan), set beside
// the floor as the other benchmarks are.
func BenchmarkSmallPutUnchanged(b *testing.B) {
	sequentialPuts(b, func(int) client.Entry { return smallFlow(0, 0) })
}
