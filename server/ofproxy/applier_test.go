package ofproxy_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/ofproxy"
)

// gateRecorder's Apply tells each change it is given and returns the
// verdict the test then hands it.
type gateRecorder struct {
	entered chan []ofconn.Message
	verdict chan error
}

func (g *gateRecorder) Apply(ctx context.Context, msgs []ofconn.Message) error {
	g.entered <- msgs
	select {
	case err := <-g.verdict:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestBarrierReplyWaitsForItsChange: a barrier after a standalone change
// goes to the switch while the change is being applied, and its reply
// reaches the controller only once the change is decided: after the
// change's error when the switch refused it, and never when its outcome
// is unknown (the connection is closed instead).
func TestBarrierReplyWaitsForItsChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := startSandbox(ctx, t)
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	rec := &gateRecorder{entered: make(chan []ofconn.Message, 1), verdict: make(chan error, 1)}
	p := startProxyWith(t, s, "br0", rec)
	mod, err := ofctl.ParseFlowBinary("table=1,priority=10,ip,nw_dst=10.0.0.1,actions=drop")
	if err != nil {
		t.Fatal(err)
	}
	replies := func() uint64 { return p.Stats().ByType(ofproxy.ToController)["BARRIER_REPLY"] }

	// change sends a FLOW_MOD and a barrier, and returns once the switch
	// answered the barrier while the change is still being applied.
	change := func(c *ofClient, xid uint32) {
		t.Helper()
		before := replies()
		c.send(withXid(mod, xid), header(20, 8, xid+1))
		select {
		case msgs := <-rec.entered:
			if len(msgs) != 1 || binary.BigEndian.Uint32(msgs[0][4:8]) != xid {
				t.Fatalf("the Recorder got %d messages, want the FLOW_MOD of xid %d", len(msgs), xid)
			}
		case <-ctx.Done():
			t.Fatal("the change never reached the Recorder")
		}
		testenv.Poll(ctx, t, "the switch's barrier reply", func() (bool, error) { return replies() > before, nil })
		// The reply is held: nothing reaches the controller until the
		// change is decided.
		if err := c.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if m, err := ofconn.ReadMessage(c.br); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("before its change was decided the controller got %x (%v), want nothing", m, err)
		}
		dl, _ := ctx.Deadline()
		if err := c.c.SetReadDeadline(dl); err != nil {
			t.Fatal(err)
		}
	}

	c := dialOF(ctx, t, p.Addr())
	change(c, 100)
	rec.verdict <- nil
	if m := c.next(); m[1] != 21 || binary.BigEndian.Uint32(m[4:8]) != 101 {
		t.Fatalf("after an applied change the controller got type %d xid %d, want the barrier reply (21, 101)", m[1], binary.BigEndian.Uint32(m[4:8]))
	}

	change(c, 200)
	rec.verdict <- &ofconn.BundleError{Failed: []ofconn.AddError{{Index: 0, Type: 5, Code: 2}}} // FLOW_MOD_FAILED, OVERLAP
	if m := c.next(); m[1] != 1 || binary.BigEndian.Uint32(m[4:8]) != 200 {
		t.Fatalf("after a refused change the controller got type %d xid %d, want its error (1, 200) first", m[1], binary.BigEndian.Uint32(m[4:8]))
	}
	if m := c.next(); m[1] != 21 || binary.BigEndian.Uint32(m[4:8]) != 201 {
		t.Fatalf("after the refusal the controller got type %d xid %d, want the barrier reply (21, 201)", m[1], binary.BigEndian.Uint32(m[4:8]))
	}

	change(c, 300)
	rec.verdict <- errors.New("injected: outcome unknown")
	if m, err := ofconn.ReadMessage(c.br); err == nil {
		t.Fatalf("after a change of unknown outcome the controller got type %d xid %d, want its connection closed", m[1], binary.BigEndian.Uint32(m[4:8]))
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("after a change of unknown outcome the connection stayed open: %v", err)
	}
}

// TestApplierBackpressure: while a change is being applied, the session
// queues what the controller sends next only up to its bound (the
// applier's 2 MiB, besides the change in flight), then stops reading, so a
// controller that floods it waits on its socket instead of filling
// flowstated's memory; once the changes are applied it reads on, and every
// message is applied, in order, before the barrier's reply.
func TestApplierBackpressure(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := startSandbox(ctx, t)
	if err := s.AddBridge(ctx, "br0"); err != nil {
		t.Fatal(err)
	}
	rec := &gateRecorder{entered: make(chan []ofconn.Message, 1024), verdict: make(chan error, 1024)}
	p := startProxyWith(t, s, "br0", rec)
	mod, err := ofctl.ParseFlowBinary("table=1,priority=10,ip,nw_dst=10.0.0.1,actions=drop")
	if err != nil {
		t.Fatal(err)
	}
	const flood = 8 << 20 // bytes: four times the queue's bound
	n := flood / len(mod)
	read := func() uint64 { return p.Stats().ByType(ofproxy.ToSwitch)["FLOW_MOD"] }

	c := dialOF(ctx, t, p.Addr())
	sent := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(c.c, 64<<10)
		for i := range n {
			if _, err := w.Write(withXid(mod, uint32(i+1))); err != nil {
				sent <- err
				return
			}
		}
		_, err := w.Write(header(20, 8, uint32(n+1)))
		if err == nil {
			err = w.Flush()
		}
		sent <- err
	}()

	var first []ofconn.Message
	select {
	case first = <-rec.entered:
	case <-ctx.Done():
		t.Fatal("no change reached the Recorder")
	}
	// The first change is held. The session reads until its queue is
	// full, then no more: 2 MiB queued, the change in flight, the pump's
	// buffer, and what the kernel holds of the socket are all it may take.
	queueFull := uint64((2<<20)/len(mod)) + uint64(len(first))
	testenv.Poll(ctx, t, "the session's queue filled", func() (bool, error) { return read() >= queueFull, nil })
	bound := uint64((4 << 20) / len(mod))
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		if got := read(); got > bound {
			t.Fatalf("with a change held the session read %d FLOW_MODs (%d bytes), past its bound of %d", got, got*uint64(len(mod)), bound)
		}
		select {
		case err := <-sent:
			t.Fatalf("the controller sent all %d bytes while a change was held (%v): the session did not stop reading", flood, err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	// Let every change through: the controller's writes complete, and the
	// Recorder got every FLOW_MOD once, in order, before the reply.
	rec.verdict <- nil
	got := len(first)
	next := uint32(1)
	for _, m := range first {
		if x := binary.BigEndian.Uint32(m[4:8]); x != next {
			t.Fatalf("the Recorder got xid %d, want %d", x, next)
		}
		next++
	}
	for got < n {
		select {
		case msgs := <-rec.entered:
			for _, m := range msgs {
				if x := binary.BigEndian.Uint32(m[4:8]); x != next {
					t.Fatalf("the Recorder got xid %d, want %d", x, next)
				}
				next++
			}
			got += len(msgs)
			rec.verdict <- nil
		case <-ctx.Done():
			t.Fatalf("the Recorder got %d of %d FLOW_MODs", got, n)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if m := c.next(); m[1] != 21 || binary.BigEndian.Uint32(m[4:8]) != uint32(n+1) {
		t.Fatalf("after every change the controller got type %d xid %d, want the barrier reply (21, %d)", m[1], binary.BigEndian.Uint32(m[4:8]), n+1)
	}
}
