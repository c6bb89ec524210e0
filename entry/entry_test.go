package entry

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// The FLOW_MODs of these tests are written out by hand from the OpenFlow 1.5
// spec rather than with an encoder library, so that this module requires
// nothing: a consumer of the client gets no OpenFlow library with it.

// flowMod is an OFPFC_ADD FLOW_MOD of table and prio matching ip
// (eth_type=0x0800) with a goto_table to table+1.
func flowMod(t testing.TB, table uint8, prio uint16) []byte {
	t.Helper()
	return flowModWith(table, prio, instruction(1, []byte{table + 1, 0, 0, 0}))
}

// flowModWith is an OFPFC_ADD FLOW_MOD (48 bytes of fixed fields, the
// match eth_type=0x0800 padded to 16, then instrs).
func flowModWith(table uint8, prio uint16, instrs ...[]byte) []byte {
	b := []byte{6, 14, 0, 0, 0, 0, 0, 0} // version 1.5, FLOW_MOD, length set below, xid
	b = append(b, make([]byte, 16)...)   // cookie, cookie_mask
	b = append(b, table, 0, 0, 0, 0, 0)  // table_id, command ADD, idle and hard timeouts
	b = binary.BigEndian.AppendUint16(b, prio)
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // buffer_id, out_port, out_group: none/any
	b = append(b, 0, 0, 0, 0)                                                             // flags, importance
	b = append(b, 0, 1, 0, 10, 0x80, 0x00, 0x0a, 0x02, 0x08, 0x00, 0, 0, 0, 0, 0, 0)      // OXM match, eth_type=0x0800
	for _, in := range instrs {
		b = append(b, in...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// instruction is an ofp_instruction of type typ with body (a multiple of 8
// bytes less 4).
func instruction(typ uint16, body []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(body)))
	return append(b, body...)
}

// actions is an apply (4) or write (3) actions instruction.
func actions(typ uint16, acts ...[]byte) []byte {
	body := []byte{0, 0, 0, 0} // pad
	for _, a := range acts {
		body = append(body, a...)
	}
	return instruction(typ, body)
}

// action is an 8-byte action of type typ with a 32-bit argument: OFPAT_GROUP
// (22) with its group_id, OFPAT_METER (29) with its meter_id.
func action(typ uint16, arg uint32) []byte {
	b := binary.BigEndian.AppendUint16(nil, typ)
	b = binary.BigEndian.AppendUint16(b, 8)
	return binary.BigEndian.AppendUint32(b, arg)
}

func TestIdentifyFlow(t *testing.T) {
	raw := flowMod(t, 3, 100)
	canon, id, err := Identify(KindFlow, raw)
	if err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint32(canon[4:]) != 0 {
		t.Fatal("xid not zeroed")
	}
	if id[0] != 3 || binary.BigEndian.Uint16(id[1:]) != 100 || FlowTable(id) != 3 {
		t.Fatalf("id %x: want table 3, priority 100", id)
	}
	// eth_type=0x0800 as OXM: class 0x8000, field 5<<1, len 2, value.
	if want := []byte{0x80, 0x00, 0x0a, 0x02, 0x08, 0x00}; !bytes.Equal(id[3:], want) {
		t.Fatalf("match part %x, want %x", id[3:], want)
	}
	// Same identity whatever the actions; another priority is another flow.
	other := flowMod(t, 3, 100)
	other[len(other)-8+4] = 9 // goto_table 9
	if _, id2, _ := Identify(KindFlow, other); !bytes.Equal(id, id2) {
		t.Fatal("actions changed the identity")
	}
	if _, id3, _ := Identify(KindFlow, flowMod(t, 3, 101)); bytes.Equal(id, id3) {
		t.Fatal("priority did not change the identity")
	}
}

func TestIdentifyRejects(t *testing.T) {
	good := flowMod(t, 0, 1)
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name, want string
		b          []byte
	}{
		{"short", "shorter than an OpenFlow header", good[:4]},
		{"version", "OpenFlow version 0x04", mutate(func(b []byte) []byte { b[0] = 4; return b })},
		{"length", "does not match", mutate(func(b []byte) []byte { return b[:len(b)-1] })},
		{"type", "want FLOW_MOD", mutate(func(b []byte) []byte { b[1] = 15; return b })},
		{"command", "want ADD", mutate(func(b []byte) []byte { b[25] = 1; return b })},
		{"match length", "match length", mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[50:], 4000); return b })},
		{"too big", "exceeds", make([]byte, MaxMessage+1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Identify(KindFlow, tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDeleteFlowStrict(t *testing.T) {
	add := flowMod(t, 2, 7)
	del := DeleteFlowStrict(add)
	// OFPFC_DELETE_STRICT is 4; the fixed part and the 16-byte match stay,
	// the instructions go.
	if len(del) != 64 || del[25] != 4 || del[24] != 2 || binary.BigEndian.Uint16(del[30:]) != 7 {
		t.Fatalf("delete = %x", del)
	}
	if !bytes.Equal(del[48:], add[48:64]) {
		t.Fatalf("delete changed the match: %x", del[48:])
	}
	if binary.BigEndian.Uint32(del[36:]) != 0xffffffff || binary.BigEndian.Uint32(del[40:]) != 0xffffffff {
		t.Fatal("delete must not filter on out_port/out_group")
	}
	if int(binary.BigEndian.Uint16(del[2:])) != len(del) {
		t.Fatal("bad length")
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"br-int", "pipeline", "a", "net.policy_1"} {
		if err := ValidateName("module", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", "a b", strings.Repeat("a", 64), "é"} {
		if err := ValidateName("module", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzIdentify(f *testing.F) {
	f.Add(uint8(1), flowMod(f, 0, 1))
	f.Add(uint8(2), []byte{6, 15, 0, 16, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 9})
	f.Add(uint8(3), []byte{6, 29, 0, 16, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		canon, id, err := Identify(Kind(kind), b)
		if err != nil {
			return
		}
		if len(canon) != len(b) || len(id) == 0 {
			t.Fatalf("canon %d bytes of %d, id %x", len(canon), len(b), id)
		}
		switch Kind(kind) {
		case KindFlow:
			_ = DeleteFlowStrict(canon)
			// The unchecked identity of dumps is the checked one.
			if got := AppendFlowID(nil, canon); !bytes.Equal(got, id) {
				t.Fatalf("AppendFlowID %x, Identify %x", got, id)
			}
		default:
			if got := ModID(canon); !bytes.Equal(got, id) {
				t.Fatalf("ModID %x, Identify %x", got, id)
			}
		}
	})
}

func TestComparableMeter(t *testing.T) {
	// meter=256,pktps,band=type=drop,rate=100 as sent, and as the userspace
	// datapath dumps it (burst_size = rate).
	sent := []byte{6, 29, 0, 32, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 1, 0, 0, 1, 0, 16, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 0}
	dumped := bytes.Clone(sent)
	dumped[27] = 100
	if !bytes.Equal(Comparable(KindMeter, sent), Comparable(KindMeter, dumped)) {
		t.Fatal("burst size of a meter without the burst flag made a difference")
	}
	withBurst := bytes.Clone(sent)
	withBurst[11] |= ofpmfBurst
	withBurst2 := bytes.Clone(withBurst)
	withBurst2[27] = 100
	if bytes.Equal(Comparable(KindMeter, withBurst), Comparable(KindMeter, withBurst2)) {
		t.Fatal("burst size of a meter with the burst flag was ignored")
	}
	orig := bytes.Clone(dumped)
	_ = Comparable(KindMeter, dumped)
	if !bytes.Equal(orig, dumped) {
		t.Fatal("Comparable changed its input")
	}
}

func TestFlowRefs(t *testing.T) {
	b := flowModWith(0, 0,
		actions(4, action(29, 256), action(22, 9)),
		actions(3, action(22, 12)),
		instruction(1, []byte{3, 0, 0, 0}))
	got := FlowRefs(b)
	want := []Ref{{KindMeter, 256}, {KindGroup, 9}, {KindGroup, 12}}
	if len(got) != len(want) {
		t.Fatalf("refs %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("refs %v, want %v", got, want)
		}
	}
	if refs := FlowRefs(flowMod(t, 0, 1)); len(refs) != 0 {
		t.Fatalf("goto_table only: %v", refs)
	}
}

func FuzzFlowRefs(f *testing.F) {
	f.Add(flowMod(f, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) { _ = FlowRefs(b) })
}

// TestFlowDrops: a flow without instructions, or with empty action lists,
// drops; one that outputs, resubmits or is malformed does not.
func TestFlowDrops(t *testing.T) {
	fm := func(instr ...byte) []byte {
		m := make([]byte, 48, 64)
		m[0], m[1] = 6, 14
		m = append(m, 0, 1, 0, 4, 0, 0, 0, 0) // an empty ofp_match, padded
		m = append(m, instr...)
		binary.BigEndian.PutUint16(m[2:], uint16(len(m)))
		return m
	}
	for _, tc := range []struct {
		name string
		m    []byte
		want bool
	}{
		{"no instructions", fm(), true},
		{"empty apply_actions", fm(0, 4, 0, 8, 0, 0, 0, 0), true},
		{"output", fm(0, 4, 0, 24, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0), false},
		{"goto_table", fm(0, 1, 0, 8, 1, 0, 0, 0), false},
		{"truncated instruction", fm(0, 4, 0), false},
		{"too short", make([]byte, 20), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FlowDrops(tc.m); got != tc.want {
				t.Fatalf("FlowDrops = %v, want %v", got, tc.want)
			}
		})
	}
}
