package canon_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/entry"
)

// TestFlowModAccessors reads table, priority, cookie and identity from
// FLOW_MODs libOpenflow encodes (here, not in package entry, whose module
// needs no OpenFlow library), so the named offsets are checked against
// an encoder that does not use them.
func TestFlowModAccessors(t *testing.T) {
	cases := []struct {
		name   string
		table  uint8
		prio   uint16
		cookie uint64
		match  []openflow15.MatchField
		// wantMatch is the OXM bytes of the match, as the identity holds them.
		wantMatch []byte
	}{
		{name: "empty match", table: 0, prio: 0, wantMatch: []byte{}},
		{name: "eth_type", table: 3, prio: 100, cookie: 0x1234,
			match:     []openflow15.MatchField{*openflow15.NewEthTypeField(0x0800)},
			wantMatch: []byte{0x80, 0x00, 0x0a, 0x02, 0x08, 0x00}},
		{name: "last table, top priority", table: 254, prio: 0xffff, cookie: ^uint64(0),
			match: []openflow15.MatchField{*openflow15.NewEthTypeField(0x86dd), *openflow15.NewInPortField(7)},
			// eth_type then in_port, in the order given.
			wantMatch: []byte{0x80, 0x00, 0x0a, 0x02, 0x86, 0xdd, 0x80, 0x00, 0x00, 0x04, 0, 0, 0, 7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fm := openflow15.NewFlowMod()
			fm.TableId, fm.Priority, fm.Cookie = c.table, c.prio, c.cookie
			for _, f := range c.match {
				fm.Match.AddField(f)
			}
			fm.AddInstruction(openflow15.NewInstrGotoTable(c.table + 1))
			b, err := fm.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if got := entry.FlowModTable(b); got != c.table {
				t.Errorf("FlowModTable %d, want %d", got, c.table)
			}
			if got := entry.FlowModPriority(b); got != c.prio {
				t.Errorf("FlowModPriority %d, want %d", got, c.prio)
			}
			if got := entry.FlowCookie(b); got != c.cookie {
				t.Errorf("FlowCookie 0x%x, want 0x%x", got, c.cookie)
			}
			want := append([]byte{c.table, byte(c.prio >> 8), byte(c.prio)}, c.wantMatch...)
			id, err := entry.FlowID(b)
			if err != nil {
				t.Fatalf("FlowID: %v", err)
			}
			if !bytes.Equal(id, want) {
				t.Errorf("FlowID %x, want %x", id, want)
			}
			_, iid, err := entry.Identify(entry.KindFlow, b)
			if err != nil || !bytes.Equal(iid, id) {
				t.Errorf("Identify %x (%v), entry.FlowID %x", iid, err, id)
			}
			// entry.AppendFlowID appends to what dst holds and reuses its memory.
			dst := make([]byte, 2, 64)
			dst[0], dst[1] = 0xaa, 0xbb
			got := entry.AppendFlowID(dst, b)
			if !bytes.Equal(got[:2], []byte{0xaa, 0xbb}) || !bytes.Equal(got[2:], want) || &got[0] != &dst[0] {
				t.Errorf("AppendFlowID %x: want aabb%x in dst's memory", got, want)
			}
			if d := entry.DeleteFlowStrict(b); entry.FlowModTable(d) != c.table || entry.FlowModPriority(d) != c.prio {
				t.Errorf("DeleteFlowStrict: table %d priority %d", entry.FlowModTable(d), entry.FlowModPriority(d))
			}
		})
	}
}

// TestFlowIDRejects: entry.FlowID checks what entry.Identify checks of a flow.
func TestFlowIDRejects(t *testing.T) {
	good := layoutFlowMod(t, 1, 2)
	cases := []struct {
		name, want string
		b          []byte
	}{
		{"short", "shorter than an OpenFlow header", good[:6]},
		{"group", "want FLOW_MOD", entry.DeleteGroup([]byte{0, 0, 0, 1})},
		{"delete", "command 4, want ADD", entry.DeleteFlowStrict(good)},
		{"length", "header length", good[:len(good)-8]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := entry.FlowID(c.b)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("FlowID: %v, want an error with %q", err, c.want)
			}
			if _, _, ierr := entry.Identify(entry.KindFlow, c.b); ierr == nil || ierr.Error() != err.Error() {
				t.Fatalf("Identify: %v, entry.FlowID: %v", ierr, err)
			}
		})
	}
}

// TestModAccessors reads the command and id of GROUP_MODs and METER_MODs
// libOpenflow encodes.
func TestModAccessors(t *testing.T) {
	marshal := func(m interface{ MarshalBinary() ([]byte, error) }) []byte {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	group := func(cmd uint16, id uint32) []byte {
		gm := openflow15.NewGroupMod()
		gm.Command, gm.GroupId = cmd, id
		return marshal(gm)
	}
	meter := func(cmd uint16, id uint32) []byte {
		mm := openflow15.NewMeterMod()
		mm.Command, mm.MeterId = cmd, id
		return marshal(mm)
	}
	cases := []struct {
		name string
		kind entry.Kind
		b    []byte
		cmd  uint16
		id   uint32
	}{
		{"group add", entry.KindGroup, group(openflow15.OFPGC_ADD, 7), 0, 7},
		{"group insert bucket", entry.KindGroup, group(openflow15.OFPGC_INSERT_BUCKET, 0xfffffff0), 3, 0xfffffff0},
		{"group delete", entry.KindGroup, entry.DeleteGroup([]byte{0, 0, 1, 0}), 2, 256},
		{"meter add", entry.KindMeter, meter(openflow15.MC_ADD, 1), 0, 1},
		{"meter modify", entry.KindMeter, entry.WithModify(meter(openflow15.MC_ADD, 9)), 1, 9},
		{"meter delete", entry.KindMeter, entry.DeleteMeter([]byte{0, 1, 0, 0}), 2, 65536},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := entry.ModCommand(c.b); got != c.cmd {
				t.Errorf("ModCommand %d, want %d", got, c.cmd)
			}
			if got := binary.BigEndian.Uint32(entry.ModID(c.b)); got != c.id {
				t.Errorf("ModID %d, want %d", got, c.id)
			}
			r, ok := entry.ModRef(c.kind, c.b)
			if !ok || r != (entry.Ref{Kind: c.kind, ID: c.id}) {
				t.Errorf("ModRef %v %v, want %s %d", r, ok, c.kind, c.id)
			}
		})
	}
	// Too short to hold an id: nothing, never a panic.
	for n := range 16 {
		b := make([]byte, n)
		if entry.ModID(b) != nil {
			t.Errorf("ModID of %d bytes: not nil", n)
		}
		if _, ok := entry.ModRef(entry.KindGroup, b); ok {
			t.Errorf("ModRef of %d bytes: ok", n)
		}
	}
}

// layoutFlowMod is an ADD of table and prio matching ip, going to table+1,
// as libOpenflow encodes it.
func layoutFlowMod(t *testing.T, table uint8, prio uint16) []byte {
	t.Helper()
	fm := openflow15.NewFlowMod()
	fm.TableId, fm.Priority = table, prio
	fm.Match.AddField(*openflow15.NewEthTypeField(0x0800))
	fm.AddInstruction(openflow15.NewInstrGotoTable(table + 1))
	b, err := fm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
