package server_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server"
)

// TestGroupCommit: concurrent writers share transactions and bundles, and a
// request the switch refuses fails alone, with its own entry index.
func TestGroupCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" })
	e.limitTable7(ctx, true)
	e.Start(ctx)
	e.WaitConverged(ctx)

	const writers = 24
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		errs   = make([]error, writers+1)
		expect []string
	)
	for w := range writers {
		flows := make([]string, 5)
		for i := range flows {
			flows[i] = fmt.Sprintf("table=1,priority=%d,ip,nw_dst=10.%d.0.%d,actions=drop", 100+i, w, i)
		}
		expect = append(expect, flows...)
		wg.Go(func() {
			<-start
			_, errs[w] = e.c.Put(ctx, client.Module{Bridge: "br-int", Name: fmt.Sprintf("pod-%d", w)}, texts(flows)...)
		})
	}
	// Table 7 takes one flow: this request's second entry is refused.
	wg.Go(func() {
		<-start
		_, errs[writers] = e.c.Put(ctx, client.Module{Bridge: "br-int", Name: "bad"}, texts([]string{"table=7,priority=1,actions=drop", "table=7,priority=2,actions=drop"})...)
	})
	close(start)
	wg.Wait()
	for w, err := range errs[:writers] {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
	var ee *errdefs.EntryError
	if err := errs[writers]; !errors.As(err, &ee) || ee.Index != 1 || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("refused request: %v, want INVALID_ARGUMENT naming entry 1", err)
	}
	e.ofctlFlows(ctx, "replace-flows", expect)
	if want, got := e.dump(ctx, "br-ref"), e.dump(ctx, "br-int"); !slices.Equal(got, want) {
		t.Fatalf("br-int holds %d flows, want %d", len(got), len(want))
	}

	body := e.Metrics(ctx)
	metric := func(series string) int {
		m := regexp.MustCompile(regexp.QuoteMeta(series) + ` (\d+)`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no %s in /metrics", series)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	ok := metric(`flowstate_write_requests_total{bridge="br-int",result="ok"}`)
	refused := metric(`flowstate_write_requests_total{bridge="br-int",result="invalid_argument"}`)
	batches := metric(`flowstate_write_batches_total{bridge="br-int"}`)
	t.Logf("%d write requests (%d refused) in %d commits", ok+refused, refused, batches)
	if ok != writers || refused != 1 || batches >= ok+refused {
		t.Fatalf("%d ok and %d refused requests in %d commits: want %d ok and 1 refused sharing commits", ok, refused, batches, writers)
	}
	if es, err := e.c.List(ctx, client.Filter{Module: "bad"}); err != nil || len(es) != 0 {
		t.Fatalf("the refused request stored %d entries (%v)", len(es), err)
	}
}

// TestPipelinedWritesFrozenVswitchd: vswitchd is frozen (SIGSTOP) while eight
// controllers Put through pipes, then thawed. A frozen switch fails no write:
// once it is declared gone, what it may not hold is stored, answered not
// applied, and replayed after SIGCONT, and the switch ends holding exactly the
// store.
func TestPipelinedWritesFrozenVswitchd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEnv(ctx, t, func(c *server.Config) { c.EchoInterval, c.EchoTimeout = 0, 0 }) // the defaults
	e.Start(ctx)
	e.WaitConverged(ctx)
	const writers, puts, per = 8, 30, 200
	var (
		wg   sync.WaitGroup
		errs = make(chan error, writers*puts)
		done atomic.Int32
		// unapplied counts the Puts stored for the replay.
		unapplied atomic.Int32
		expected  []string
	)
	for w := range writers {
		var mine []string
		for i := range puts * per {
			mine = append(mine, fmt.Sprintf("table=3,priority=10,ip,nw_src=10.%d.%d.%d,actions=drop", w, i>>8, i&255))
		}
		expected = append(expected, mine...)
		wg.Go(func() {
			for i := range puts {
				applied, err := e.c.Put(ctx, client.Module{Bridge: "br-int", Name: fmt.Sprint("w", w)}, texts(mine[i*per:(i+1)*per])...)
				if err != nil {
					errs <- fmt.Errorf("writer %d, put %d: %w", w, i, err)
				} else if !applied {
					unapplied.Add(1)
				}
				done.Add(1)
			}
		})
	}
	poll(ctx, t, "writes under way", func() (bool, error) { return done.Load() >= writers, nil })
	if err := e.sb.FreezeVswitchd(); err != nil {
		t.Fatal(err)
	}
	if done.Load() == writers*puts {
		t.Fatal("every write was done before vswitchd froze")
	}
	poll(ctx, t, "frozen vswitchd declared gone", func() (bool, error) {
		return !e.bridgeStatus(ctx, "br-int").Connected, nil
	})
	if err := e.sb.ThawVswitchd(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if unapplied.Load() == 0 {
		t.Fatal("no write was answered not applied: the freeze missed the writes")
	}
	t.Logf("%d of %d Puts stored for the replay", unapplied.Load(), writers*puts)
	e.WaitConverged(ctx)
	if changes, err := e.c.Diff(ctx, "br-int"); err != nil || len(changes) != 0 {
		t.Fatalf("diff after the thaw: %d changes, %v", len(changes), err)
	}
	e.assertExact(ctx, expected)
}
