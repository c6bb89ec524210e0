package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// TestKillDuringStreamedWrite: flowstated is killed (SIGKILL) while a large
// write streams to the switch, at five moments of it (while the request
// arrives, while its bundle is sent, around the commit), the write held in
// memory (one store transaction) and staged (--stage-above: spooled, staged in
// transactions of its own, swapped in by one). Whatever the moment, once
// flowstated is back the write is all there or not at all, in the store and
// on the switch alike: a bundle left open by a dead flowstated is dropped by
// vswitchd, a store transaction not committed leaves nothing, and a staged
// bucket not swapped in is dropped at the next start. The staged write with a
// group and a meter sends the meter ahead of its bundle: killed after that, a
// meter the store never took is left on the switch, which the replay of the
// next start takes off.
func TestKillDuringStreamedWrite(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stageAbove string
		groups     bool
	}{{"in memory", "100000", false}, {"staged", "10000", false}, {"staged with a group and a meter", "10000", true}} {
		t.Run(tc.name, func(t *testing.T) { killDuringWrite(t, tc.stageAbove, tc.groups) })
	}
}

func killDuringWrite(t *testing.T, stageAbove string, groups bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "off", "--audit-interval", "0",
		"--rearm-flow-restore-wait=false", "--ofp-echo-timeout", "5s", "--stage-above", stageAbove)
	n.start(ctx)
	converged := func() *client.Status {
		var st *client.Status
		n.poll(ctx, "converged", func() bool {
			var err error
			st, err = n.c.Status(ctx)
			return err == nil && st.Bridges[0].Converged
		})
		return st
	}
	converged()
	const flows = 60_000
	es := make([]client.Entry, flows)
	for i := range es {
		actions := "drop"
		if groups {
			actions = []string{"group:5", "meter:6,resubmit(,2)"}[i%2]
		}
		es[i] = client.FlowText(fmt.Sprintf("table=1,priority=10,ip,nw_dst=10.%d.%d.%d,actions=%s", i>>16&255, i>>8&255, i&255, actions))
	}
	nonFlows := 0
	if groups {
		es = append([]client.Entry{client.GroupText("group_id=5,type=select,bucket=actions=drop"),
			client.MeterText("meter=6,kbps,band=type=drop,rate=1000")}, es...)
		nonFlows = 2
	}
	// count counts the groups or meters on the switch.
	count := func(what, prefix string) int {
		out, err := n.sb.Ofctl(ctx, what, "br-int")
		if err != nil {
			t.Fatal(err, out)
		}
		return strings.Count(out, prefix)
	}
	// How long the write takes here, to strike at fractions of it.
	start := time.Now()
	if _, err := n.c.Put(ctx, client.Module{Bridge: "br-int", Name: "big"}, es...); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "big"}, false); err != nil {
		t.Fatal(err)
	}
	converged()
	for _, frac := range []float64{0.3, 0.6, 0.8, 0.95, 1.1} {
		after := time.Duration(frac * float64(took))
		done := make(chan error, 1)
		go func() {
			_, err := n.c.Put(ctx, client.Module{Bridge: "br-int", Name: "big"}, es...)
			done <- err
		}()
		time.Sleep(after) // when the fault strikes: the point of the test
		n.signal(ctx, syscall.SIGKILL)
		putErr := <-done
		n.start(ctx)
		st := converged()
		stored, storedNonFlows := 0, 0
		for _, m := range st.Modules {
			if m.Name == "big" {
				stored, storedNonFlows = m.Flows, m.Groups+m.Meters
			}
		}
		onSwitch := 0
		for _, l := range n.dump(ctx, "br-int") {
			if strings.Contains(l, "table=1,") || strings.Contains(l, "table=1 ") {
				onSwitch++
			}
		}
		t.Logf("killed %v into a write of %v (Put: %v): %d stored, %d on the switch", after.Round(time.Millisecond), took.Round(time.Millisecond), putErr, stored, onSwitch)
		if stored != 0 && stored != flows {
			t.Fatalf("killed %v into the write: %d of %d flows stored, want all or none", after, stored, flows)
		}
		if onSwitch != stored {
			t.Fatalf("killed %v into the write: %d flows on the switch, %d stored", after, onSwitch, stored)
		}
		if want := nonFlows * min(stored, 1); storedNonFlows != want {
			t.Fatalf("killed %v into the write: %d groups and meters stored with %d flows, want %d", after, storedNonFlows, stored, want)
		}
		if g, m := count("dump-groups", "group_id="), count("dump-meters", "meter="); g+m != storedNonFlows {
			t.Fatalf("killed %v into the write: %d groups and %d meters on the switch, %d stored", after, g, m, storedNonFlows)
		}
		if cs, err := n.c.Diff(ctx, "br-int"); err != nil || len(cs) != 0 {
			t.Fatalf("diff after the restart: %d changes, %v", len(cs), err)
		}
		if _, err := n.c.Sync(ctx, client.Module{Bridge: "br-int", Name: "big"}, false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKillDuringPipelinedWrites: flowstated is killed (SIGKILL) while eight
// writers Put a thousand flows at a time, the writes pipelined (the switch
// deciding one batch while the store writes the last). Once it is back, each
// Put is there whole or not at all, and the switch holds exactly what the
// store does: a batch the switch took but the store never committed is
// taken off again by the replay.
func TestKillDuringPipelinedWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := newNode(ctx, t, []string{"br-int"}, "--bridge", "br-int", "--guard", "off", "--audit-interval", "0",
		"--rearm-flow-restore-wait=false", "--ofp-echo-timeout", "5s")
	n.start(ctx)
	const writers, puts, per = 8, 40, 1000
	for _, after := range []time.Duration{150 * time.Millisecond, 400 * time.Millisecond} {
		n.poll(ctx, "converged", func() bool {
			st, err := n.c.Status(ctx)
			return err == nil && st.Bridges[0].Converged
		})
		var wg sync.WaitGroup
		wc := n.failFast()
		for w := range writers {
			wg.Go(func() {
				for i := range puts {
					es := make([]client.Entry, per)
					for j := range es {
						x := i*per + j
						es[j] = client.FlowText(fmt.Sprintf("table=2,priority=10,ip,nw_src=10.%d.%d.%d,actions=drop", w, x>>8&255, x&255))
					}
					if _, err := wc.Put(ctx, client.Module{Bridge: "br-int", Name: fmt.Sprint("w", w)}, es...); err != nil {
						return // flowstated is gone
					}
				}
			})
		}
		time.Sleep(after) // when the fault strikes: the point of the test
		n.signal(ctx, syscall.SIGKILL)
		wg.Wait()
		n.start(ctx)
		var st *client.Status
		n.poll(ctx, "converged after the restart", func() bool {
			var err error
			st, err = n.c.Status(ctx)
			return err == nil && st.Bridges[0].Converged
		})
		total := 0
		for _, m := range st.Modules {
			if strings.HasPrefix(m.Name, "w") {
				if m.Flows%per != 0 {
					t.Fatalf("killed %v into the writes: module %s holds %d flows, not whole Puts of %d", after, m.Name, m.Flows, per)
				}
				total += m.Flows
			}
		}
		onSwitch := 0
		for _, l := range n.dump(ctx, "br-int") {
			if strings.Contains(l, "table=2,") || strings.Contains(l, "table=2 ") {
				onSwitch++
			}
		}
		t.Logf("killed %v into the writes: %d flows stored, %d on the switch", after, total, onSwitch)
		if onSwitch != total {
			t.Fatalf("killed %v into the writes: %d flows on the switch, %d stored", after, onSwitch, total)
		}
		if cs, err := n.c.Diff(ctx, "br-int"); err != nil || len(cs) != 0 {
			t.Fatalf("diff after the restart: %d changes, %v", len(cs), err)
		}
	}
}
