package restore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/server/ofconn"
)

// TestTLVOutcomeUnknown: the reply to a controller's TLV table mod is lost
// (Faults.AfterBundle stands for it, after the switch took the message). The
// change is a write transaction like any other: the controller gets an
// error that is no refusal, and the bridge replays by itself, so that the
// switch ends with the store's mappings.
//   - An add is stored before it is sent: it stays stored, and the switch
//     holds it after the replay.
//   - A delete is sent before it is stored: the switch dropped the mapping,
//     the store still holds it (ahead of the switch, never behind), and the
//     replay puts it back.
func TestTLVOutcomeUnknown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errLost := errors.New("reply lost")
	lost := &oneShot{err: errLost}
	e := startEngine(ctx, t, &Faults{AfterBundle: lost.fire})
	r, err := e.Writes().Recorder(testBridge, "m")
	if err != nil {
		t.Fatal(err)
	}
	m := ofconn.TLVMap{Class: 0x102, Type: 0x80, Len: 4, Index: 3}
	onSwitch := func() bool {
		t.Helper()
		out, err := e.sb.Ofctl(ctx, "dump-tlv-map", testBridge)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(out, "tun_metadata3")
	}
	stored := func() int {
		t.Helper()
		ms, err := e.cfg.Store.TLVMaps().Get(testBridge)
		if err != nil {
			t.Fatal(err)
		}
		return len(ms)
	}
	apply := func(cmd uint16) {
		t.Helper()
		t0 := time.Now()
		lost.arm()
		err := r.Apply(ctx, []ofconn.Message{ofconn.TLVTableMod(cmd, []ofconn.TLVMap{m})})
		var be *ofconn.BundleError
		if !errors.Is(err, errLost) || errors.As(err, &be) {
			t.Fatalf("apply: %v, want the lost reply, not a refusal", err)
		}
		if !lost.fired() {
			t.Fatal("the fault never ran: the message was not sent")
		}
		convergedAfter(ctx, t, e, t0)
	}

	apply(ofconn.TLVAdd)
	if n := stored(); n != 1 {
		t.Fatalf("%d mappings stored after an add whose reply was lost, want 1", n)
	}
	if !onSwitch() {
		t.Fatal("the switch lacks the mapping after the replay")
	}

	apply(ofconn.TLVDelete)
	if n := stored(); n != 1 {
		t.Fatalf("%d mappings stored after a delete whose reply was lost, want 1: the store fell behind the switch", n)
	}
	if !onSwitch() {
		t.Fatal("the replay did not put back the mapping the store holds")
	}

	// Without the fault, the delete goes through: the test's mapping
	// really was on the switch and in the store.
	if err := r.Apply(ctx, []ofconn.Message{ofconn.TLVTableMod(ofconn.TLVDelete, []ofconn.TLVMap{m})}); err != nil {
		t.Fatal(err)
	}
	if stored() != 0 || onSwitch() {
		t.Fatal("the delete left the mapping")
	}
}
