package restore

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/internal/sandbox"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/store"
)

// flowEntry parses one flow in ovs-ofctl syntax into a stored entry.
func flowEntry(t *testing.T, module, text string) entry.Entry {
	t.Helper()
	fm, err := ofctl.ParseFlow(text)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := fm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	payload, id, err := entry.Identify(entry.KindFlow, raw)
	if err != nil {
		t.Fatal(err)
	}
	return entry.Entry{Kind: entry.KindFlow, Module: module, ID: id, Payload: payload}
}

// TestFlagClearAckTimeout injects the fault the flag protocol must survive:
// vswitchd freezes right as the flag is cleared, so the acknowledgement
// times out, again and again while it stays frozen. The retries must not
// re-arm the flag before vswitchd has read the clear (it would then stay
// held for ever); once it thaws the node is released and only then re-armed.
func TestFlagClearAckTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := sb.AddBridge(ctx, "br-int"); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"br-int-p1", "br-int-p2"} {
		if err := sb.AddPort(ctx, "br-int", p, i+1); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(filepath.Join(sb.Dir(), "fs.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fwd := flowEntry(t, "pipeline", "table=0,priority=10,in_port=1,actions=output:2")
	if err := st.Update(func(w *store.Writer) error {
		_, err := w.Put("br-int", "pipeline", []entry.Entry{fwd})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// vswitchd starts held, as after a crash with the flag armed.
	if err := sb.RestartVswitchd(ctx, true); err != nil {
		t.Fatal(err)
	}

	faults := &Faults{}
	e, err := New(Config{
		Store: st, RunDir: sb.RunDir(), OVSDB: sb.DBAddr(), Bridges: []string{"br-int"},
		EchoInterval: 5 * time.Second, EchoTimeout: 10 * time.Second,
		RetryInterval: 100 * time.Millisecond, AckTimeout: 300 * time.Millisecond,
		Rearm: true, BootID: "b", Logger: testLogger(t), Faults: faults,
	})
	if err != nil {
		t.Fatal(err)
	}
	const frozenFor = 1500 * time.Millisecond
	var once sync.Once
	// thawing is set before SIGCONT: a re-arm seen before it is a re-arm
	// vswitchd could not have acknowledged.
	var thawing atomic.Bool
	thawed := make(chan struct{})
	faults.BeforeClear = func() {
		once.Do(func() {
			if err := sb.FreezeVswitchd(); err != nil {
				t.Error(err)
			}
			time.AfterFunc(frozenFor, func() {
				thawing.Store(true)
				if err := sb.ThawVswitchd(); err != nil {
					t.Error(err)
				}
				close(thawed)
			})
		})
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); e.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// While vswitchd is frozen, the flag must stay cleared: the clear was
	// written but not read. Wait for the clear first (the engine checks
	// which store manages the bridge before it replays).
	for {
		if on, err := sb.FlowRestoreWait(ctx); err == nil && !on {
			break
		}
		select {
		case <-thawed:
			t.Fatal("vswitchd thawed before the flag was seen cleared")
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	for {
		select {
		case <-thawed:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
			if on, err := sb.FlowRestoreWait(ctx); err == nil && on && !thawing.Load() {
				t.Fatal("flow-restore-wait re-armed while vswitchd had not acknowledged its clear")
			}
			continue
		}
		break
	}
	// Thawed: vswitchd reads the clear, forwards through the restored flow,
	// and the flag is re-armed afterwards.
	deadline := time.Now().Add(20 * time.Second)
	for {
		on, err := sb.FlowRestoreWait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, tx0, err := sb.PortStats(ctx, "br-int", "br-int-p2")
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.InjectSYN(ctx, "br-int", "br-int-p1", sandbox.Packet{SrcPort: uint16(41000 + time.Now().UnixMilli()%1000)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		_, tx1, err := sb.PortStats(ctx, "br-int", "br-int-p2")
		if err != nil {
			t.Fatal(err)
		}
		if on && tx1 > tx0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the thaw: flag armed %v, forwarding %v; want both (released, then re-armed)", on, tx1 > tx0)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
