package canon

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/flowstate-io/flowstate/ofctl"
)

// setField encodes a set_field of OXM header h (class, field, mask bit and
// length) with body v (value, then mask when masked), its padding filled
// with pad.
func setField(h uint32, v []byte, pad byte) []byte {
	n := pad8(8 + len(v))
	a := binary.BigEndian.AppendUint16(nil, actionSetField)
	a = binary.BigEndian.AppendUint16(a, uint16(n))
	a = binary.BigEndian.AppendUint32(a, h)
	a = append(a, v...)
	return append(a, bytes.Repeat([]byte{pad}, n-len(a))...)
}

// TestExactActionsAsParsed holds the register set_fields canonicalised from
// their bytes alone (isExactAction) to what printing and parsing them back
// gives, in every kind of context: a flow's apply_actions, its
// write_actions, a group bucket. (Output, group and meter are not: OVS keeps
// an output's max_len, which the text does not show.) The parser's output
// is itself held to OVS's dumps by the corpus and switch tests.
func TestExactActionsAsParsed(t *testing.T) {
	ip, err := ofctl.CanonicalMatch([]byte{0x80, 0x00, 0x0a, 0x02, 0x08, 0x00}) // eth_type=0x0800
	if err != nil {
		t.Fatal(err)
	}
	contexts := map[string]func() *ofctl.ActionContext{
		"apply_actions": func() *ofctl.ActionContext {
			cx, err := ofctl.FlowActions(ip, 3)
			if err != nil {
				t.Fatal(err)
			}
			return cx
		},
		"write_actions": func() *ofctl.ActionContext {
			cx, err := ofctl.FlowActions(nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			return cx.WriteActions()
		},
		"bucket": ofctl.BucketActions,
	}
	var acts [][]byte
	values := [][]byte{{0, 0, 0, 0}, {0, 0, 0, 1}, {0xff, 0xff, 0xff, 0xff}, {0x80, 0, 0x12, 0x34}}
	for n := range uint32(16) {
		for _, v := range values {
			for _, pad := range []byte{0, 0xa5} {
				acts = append(acts,
					setField(classNXM1<<16|n<<9|4, v, pad),
					setField(classNXM1<<16|n<<9|0x100|8, append(append([]byte(nil), v...), 0xff, 0xff, 0xff, 0xff), pad))
			}
		}
	}
	for n := range uint32(8) {
		for _, v := range values {
			v8 := append(append([]byte(nil), v...), v...)
			acts = append(acts,
				setField(classPktReg<<16|n<<9|8, v8, 0),
				setField(classPktReg<<16|n<<9|0x100|16, append(append([]byte(nil), v8...), bytes.Repeat([]byte{0xff}, 8)...), 0))
		}
	}
	for name, newCx := range contexts {
		for _, a := range acts {
			if !isExactAction(a) {
				t.Fatalf("isExactAction(% x) = false", a)
			}
			want, ok := newCx().Canonical(a)
			if !ok {
				t.Fatalf("%s: % x: the parser does not take it back", name, a)
			}
			if got := appendExactAction(nil, a); !bytes.Equal(got, want) {
				t.Errorf("%s: % x:\n got % x\nwant % x (printed and parsed back)", name, a, got, want)
			}
		}
	}
	// Neighbours of the register set_fields keep going through the parser.
	for _, a := range [][]byte{
		setField(classNXM1<<16|16<<9|4, []byte{0, 0, 0, 1}, 0),                             // NXM1 field 16 is not a register
		setField(classNXM1<<16|1<<9|0x100|8, []byte{0, 0, 0, 1, 0, 0, 0, 0xf}, 0),          // partial mask
		setField(classPktReg<<16|8<<9|8, make([]byte, 8), 0),                               // no xreg8
		setField(classNXM1<<16|1<<9|4, []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 0)[:24], // longer than its field
	} {
		if isExactAction(a) {
			t.Errorf("isExactAction(% x) = true", a)
		}
	}
}

func FuzzExactAction(f *testing.F) {
	f.Add(setField(classNXM1<<16|3<<9|4, []byte{1, 2, 3, 4}, 0))
	f.Add(setField(classPktReg<<16|2<<9|0x100|16, bytes.Repeat([]byte{0xff}, 16), 0))
	f.Fuzz(func(t *testing.T, a []byte) {
		// Output, group and meter are exact by what OVS keeps, not by
		// what the parser gives back (see TestExactActionsAsParsed).
		if len(a) < 8 || binary.BigEndian.Uint16(a) != actionSetField || int(binary.BigEndian.Uint16(a[2:])) != len(a) || !isExactAction(a) {
			return
		}
		got := appendExactAction(nil, a)
		want, ok := ofctl.BucketActions().Canonical(a)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("% x: exact form % x, parsed back % x (%v)", a, got, want, ok)
		}
		if !isExactAction(got) || !bytes.Equal(appendExactAction(nil, got), got) {
			t.Fatalf("% x: exact form % x is not a fixed point", a, got)
		}
	})
}
