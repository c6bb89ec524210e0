package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/errdefs"
)

// A controller declares its complete set of flows at start-up and marks itself
// ready, waits until the node forwards through the restored pipeline, then
// follows flowstated's events, resyncing when it must.
func Example() {
	c, err := client.New(client.DefaultTarget)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// The call waits for flowstated (restarting, say) until syncCtx ends.
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pod := client.Module{Bridge: "br-int", Name: "pod"}
	res, err := c.Sync(syncCtx, pod, true,
		client.FlowText("table=0,priority=100,in_port=10,actions=set_field:0x3/0xf->reg0,goto_table:1"),
		client.FlowText("table=1,priority=100,ip,nw_dst=10.10.0.26,actions=output:10"),
	)
	var ee *errdefs.EntryError
	switch {
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(err, errdefs.ErrUnavailable):
		log.Fatalf("flowstated did not answer in 30 s: %v", err) // the error names the last cause
	case errors.As(err, &ee):
		log.Fatalf("entry %d refused: %v", ee.Index, err)
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		log.Fatalf("conflict with another module: %v", err)
	case err != nil:
		log.Fatal(err)
	}

	log.Printf("%s: %d entries, applied %v", pod, res.Stored, res.Applied)

	// The error names what is missing: a module the gate awaits, a bridge
	// that does not connect and why.
	if _, err := c.WaitConverged(syncCtx); err != nil {
		log.Fatal(err)
	}

	// Follow the events. After a resync the controller reads the state
	// again once the new watch is established (its first event), so no
	// change falls between the read and the watch.
	var at client.Cursor
	synced := true
	for ctx.Err() == nil {
		err := c.Watch(ctx, at, func(ev client.Event) error {
			at = ev.Cursor()
			if !synced {
				st, err := c.Status(ctx)
				if err != nil {
					return err
				}
				log.Printf("resynced: %d bridges, flow-restore-wait %v", len(st.Bridges), st.FlowRestoreWait)
				synced = true
			}
			switch ev.Type {
			case client.EventGateOpened:
				log.Printf("gate open: %s", ev.Message)
			case client.EventReplayFinished:
				log.Printf("%s restored: %s", ev.Bridge, ev.Message)
			case client.EventEntryQuarantined:
				log.Printf("%s refused an entry of %s: %s", ev.Bridge, ev.Module, ev.Message)
			}
			return nil
		})
		switch {
		case errors.Is(err, client.ErrResync):
			// flowstated restarted: what happened since is unknown.
			at, synced = client.Cursor{}, false
		case errors.Is(err, errdefs.ErrUnavailable):
			// flowstated is away for longer than the reconnect window;
			// Watch resumes from at when it is back.
			log.Print(err)
		case err != nil:
			log.Print(err)
			return
		}
		if err != nil {
			time.Sleep(time.Second)
		}
	}
}

// A policy controller replaces its whole set, however large, without
// building it in memory first: SyncSeq streams the entries as the
// iterator yields them, and the set is still written all or nothing.
func ExampleClient_SyncSeq() {
	c, err := client.New(client.DefaultTarget)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	rules := func(yield func(client.Entry, error) bool) {
		for i := range 300_000 {
			text := fmt.Sprintf("table=70,priority=200,ip,nw_src=10.%d.%d.%d,actions=conjunction(%d,1/2)", i>>16&255, i>>8&255, i&255, 1+i%4096)
			if !yield(client.FlowText(text), nil) {
				return
			}
		}
	}
	res, err := c.SyncSeq(context.Background(), client.Module{Bridge: "br-int", Name: "policy"}, true, rules)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d flows: %d added, %d changed, %d removed", res.Stored, res.Added, res.Changed, res.Removed)
}
