package ofmods

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// maxFuzzMessages bounds the messages of one input: enough for every
// interplay the scenarios have.
const maxFuzzMessages = 32

// splitFuzz cuts data into messages by their header lengths, as the proxy
// frames them; a length that does not fit (or data too short to hold one)
// makes the rest one message, so short and inconsistent messages reach
// Apply too.
func splitFuzz(data []byte) [][]byte {
	var msgs [][]byte
	for len(data) > 0 && len(msgs) < maxFuzzMessages {
		n := len(data)
		if n >= 4 {
			if l := int(binary.BigEndian.Uint16(data[2:])); l > 0 && l < n {
				n = l
			}
		}
		msgs = append(msgs, data[:n:n])
		data = data[n:]
	}
	return msgs
}

// FuzzApply runs arbitrary messages against the initial entries: Apply
// must not panic, must leave the store's entries as they were, must
// refuse only with a *Refusal naming one of the messages, and must return
// a change of the module's own entries whose indexes name messages.
//
// Seeds are the scenarios of TestApplyDifferential, each as its messages
// back to back: valid messages that reach every path, for the fuzzer to
// mutate. testdata/fuzz/FuzzApply keeps them, and what fuzzing finds,
// across changes of the table.
func FuzzApply(f *testing.F) {
	st := newStore(f, initial)
	before := make([][]byte, len(st.entries))
	for i, e := range st.entries {
		before[i] = bytes.Clone(e.Payload)
	}
	for _, sc := range scenarios() {
		f.Add(bytes.Join(encodeAll(f, sc.msgs), nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs := splitFuzz(data)
		ch, err := Apply(mod, st, msgs)
		for i, e := range st.entries {
			if !bytes.Equal(e.Payload, before[i]) {
				t.Fatalf("Apply wrote into stored entry %d (%s)", i, describe(e))
			}
		}
		if err != nil {
			var r *Refusal
			switch {
			case !errors.As(err, &r):
				t.Fatalf("Apply = %v: not a *Refusal (the store does not fail)", err)
			case r.Index < 0 || r.Index >= len(msgs):
				t.Fatalf("refusal of message %d of %d: %v", r.Index, len(msgs), err)
			case ch != nil:
				t.Fatalf("refused with a change: %+v", ch)
			}
			return
		}
		checkChange(t, st, len(msgs), ch)
		// The same messages, the same change: nothing depends on map order.
		if again, err := Apply(mod, st, msgs); err != nil || !reflect.DeepEqual(again, ch) {
			t.Fatalf("Apply again = %+v, %v; first %+v", again, err, ch)
		}
	})
}
