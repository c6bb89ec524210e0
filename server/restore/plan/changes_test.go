package plan

import (
	"encoding/binary"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

func ent(kind entry.Kind, id byte, payload string) entry.Entry {
	return entry.Entry{Kind: kind, ID: []byte{id}, Payload: []byte(payload)}
}

func TestDiff(t *testing.T) {
	desired := []entry.Entry{
		ent(entry.KindFlow, 1, "same"),
		ent(entry.KindFlow, 2, "new content"),
		ent(entry.KindFlow, 3, "missing"),
		ent(entry.KindFlow, 4, "quarantined"),
	}
	actual := []ActualEntry{
		{Kind: entry.KindFlow, ID: []byte{1}, Payload: []byte("same")},
		{Kind: entry.KindFlow, ID: []byte{2}, Payload: []byte("old content")},
		{Kind: entry.KindFlow, ID: []byte{9}, Payload: []byte("undeclared")},
		{Kind: entry.KindGroup, ID: []byte{1}, Payload: []byte("a group with a flow's id")},
	}
	cs := Diff(desired, actual, map[string]bool{Key(entry.KindFlow, []byte{4}): true})
	got := map[string]Op{}
	for _, c := range cs {
		id := c.Desired.ID
		if c.Op == OpDelete {
			id = []byte{c.Actual[0]}
		}
		got[c.Kind.String()+":"+string(id)] = c.Op
	}
	want := map[string]Op{
		"flow:\x02": OpModify,
		"flow:\x03": OpAdd,
		"flow:u":    OpDelete, // "undeclared"
		"group:a":   OpDelete, // kinds do not share identities
	}
	if len(got) != len(want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	for k, op := range want {
		if got[k] != op {
			t.Fatalf("changes %v, want %v", got, want)
		}
	}
	if cs := Diff(desired[:1], actual[:1], nil); len(cs) != 0 {
		t.Fatalf("no difference gave %v", cs)
	}
}

func TestSendOrder(t *testing.T) {
	c := func(kind entry.Kind, op Op) Change { return Change{Kind: kind, Op: op} }
	p := NewSendOrder([]Change{
		c(entry.KindGroup, OpDelete), c(entry.KindFlow, OpAdd), c(entry.KindMeter, OpDelete),
		c(entry.KindFlow, OpDelete), c(entry.KindMeter, OpAdd), c(entry.KindGroup, OpAdd),
		c(entry.KindFlow, OpModify), c(entry.KindGroup, OpModify), c(entry.KindMeter, OpModify),
	})
	str := func(cs []Change) string {
		s := ""
		for _, c := range cs {
			s += c.Kind.String() + "-" + c.Op.String() + " "
		}
		return s
	}
	if got, want := str(p.Pre), "meter-add meter-modify "; got != want {
		t.Errorf("before the bundle: %q, want %q", got, want)
	}
	if got, want := str(p.Bundle), "group-add group-modify flow-delete flow-add flow-modify group-delete "; got != want {
		t.Errorf("bundle: %q, want %q", got, want)
	}
	if got, want := str(p.Post), "meter-delete "; got != want {
		t.Errorf("after the bundle: %q, want %q", got, want)
	}
}

func TestChangeMessages(t *testing.T) {
	groupAdd := make([]byte, 24)
	groupAdd[0], groupAdd[1] = 6, 15
	binary.BigEndian.PutUint16(groupAdd[2:], 24)
	binary.BigEndian.PutUint32(groupAdd[12:], 77)
	g := entry.Entry{Kind: entry.KindGroup, ID: groupAdd[12:16], Payload: groupAdd}
	if m := (Change{Kind: entry.KindGroup, Op: OpModify, Desired: g}).Messages()[0]; binary.BigEndian.Uint16(m[8:]) != 1 {
		t.Fatalf("group modify has command %d", binary.BigEndian.Uint16(m[8:]))
	}
	del := (Change{Kind: entry.KindGroup, Op: OpDelete, Actual: groupAdd}).Messages()[0]
	if binary.BigEndian.Uint16(del[8:]) != 2 || binary.BigEndian.Uint32(del[12:]) != 77 {
		t.Fatalf("group delete %x", del)
	}
	if m := (Change{Kind: entry.KindGroup, Op: OpAdd, Desired: g}).Messages()[0]; &m[0] != &groupAdd[0] {
		t.Fatal("add does not send the payload as is")
	}
}
