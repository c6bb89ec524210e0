package restore

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
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
	actual := []actualEntry{
		{kind: entry.KindFlow, id: []byte{1}, payload: []byte("same")},
		{kind: entry.KindFlow, id: []byte{2}, payload: []byte("old content")},
		{kind: entry.KindFlow, id: []byte{9}, payload: []byte("undeclared")},
		{kind: entry.KindGroup, id: []byte{1}, payload: []byte("a group with a flow's id")},
	}
	cs := diff(desired, actual, map[string]bool{key(entry.KindFlow, []byte{4}): true})
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
	if cs := diff(desired[:1], actual[:1], nil); len(cs) != 0 {
		t.Fatalf("no difference gave %v", cs)
	}
}

func TestSendOrder(t *testing.T) {
	c := func(kind entry.Kind, op Op) Change { return Change{Kind: kind, Op: op} }
	p := newSendOrder([]Change{
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
	if got, want := str(p.pre), "meter-add meter-modify "; got != want {
		t.Errorf("before the bundle: %q, want %q", got, want)
	}
	if got, want := str(p.bundle), "group-add group-modify flow-delete flow-add flow-modify group-delete "; got != want {
		t.Errorf("bundle: %q, want %q", got, want)
	}
	if got, want := str(p.post), "meter-delete "; got != want {
		t.Errorf("after the bundle: %q, want %q", got, want)
	}
}

func TestChangeMessages(t *testing.T) {
	groupAdd := make([]byte, 24)
	groupAdd[0], groupAdd[1] = 6, 15
	binary.BigEndian.PutUint16(groupAdd[2:], 24)
	binary.BigEndian.PutUint32(groupAdd[12:], 77)
	g := entry.Entry{Kind: entry.KindGroup, ID: groupAdd[12:16], Payload: groupAdd}
	if m := (Change{Kind: entry.KindGroup, Op: OpModify, Desired: g}).messages()[0]; binary.BigEndian.Uint16(m[8:]) != 1 {
		t.Fatalf("group modify has command %d", binary.BigEndian.Uint16(m[8:]))
	}
	del := (Change{Kind: entry.KindGroup, Op: OpDelete, Actual: groupAdd}).messages()[0]
	if binary.BigEndian.Uint16(del[8:]) != 2 || binary.BigEndian.Uint32(del[12:]) != 77 {
		t.Fatalf("group delete %x", del)
	}
	if m := (Change{Kind: entry.KindGroup, Op: OpAdd, Desired: g}).messages()[0]; &m[0] != &groupAdd[0] {
		t.Fatal("add does not send the payload as is")
	}
}

func TestQuarantineSkipsDependents(t *testing.T) {
	meter7, meter8 := meterEnt(t, 7), meterEnt(t, 8)
	flows := []entry.Entry{flowEnt(t, 0, 1, 0, 7), flowEnt(t, 0, 2, 0, 8), flowEnt(t, 0, 3, 0, 7)}
	fs := testScan(t, append([]entry.Entry{meter7, meter8}, flows...), nil, nil)
	e := &Engine{cfg: Config{Store: fs.store}}
	var q quarantineSet
	q.add(key(entry.KindMeter, meter7.ID), entry.KindMeter, "m", "refused", time.Now(), false)
	skip, err := e.quarantineSkips("br-int", &q)
	if err != nil {
		t.Fatal(err)
	}
	if len(skip) != 3 || !skip[key(entry.KindFlow, flows[0].ID)] || skip[key(entry.KindFlow, flows[1].ID)] || !skip[key(entry.KindFlow, flows[2].ID)] {
		t.Fatalf("skip %v, want meter 7 and the flows of priority 1 and 3", skip)
	}
	if skip, _ := e.quarantineSkips("br-int", &quarantineSet{}); len(skip) != 0 {
		t.Fatal("skips without a quarantine")
	}
}

func TestStoreOutsideOwnedSpace(t *testing.T) {
	inside, outside := flowEnt(t, 0, 1, 0, 0), flowEnt(t, 0, 2, 0, 0)
	inside.Payload[8+6] = 0x10 // cookie 0x1000
	outside.Payload[8+6] = 0x20
	fs := testScan(t, []entry.Entry{inside, outside}, nil, nil)
	space := entry.CookieSpace{Value: 0x1000, Mask: 0xf000}
	err := checkStoreOwned(fs.store, []string{"br-int"}, space)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "outside the owned cookie space 0x1000/0xf000 (the first has cookie 0x2000)") {
		t.Fatalf("store with a flow outside the space: %v", err)
	}
	if err := checkStoreOwned(fs.store, []string{"br-int"}, entry.CookieSpace{Value: 0, Mask: 0xc000}); err != nil {
		t.Fatalf("both flows inside: %v", err)
	}
	e := &Engine{cfg: Config{OwnedCookie: space}}
	err = e.checkOwned([]entry.Entry{inside, groupEnt(t, 1), outside})
	var ee *errdefs.EntryError
	if !errors.As(err, &ee) || ee.Index != 2 || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("write with a flow outside the space: %v, want entries[2] refused", err)
	}
}
