package entry

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

// bucket is an ofp15_bucket of id with actions and properties as given.
func bucket(id uint32, actions, props []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(bucketFixed+len(actions)+len(props)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(actions)))
	b = binary.BigEndian.AppendUint32(b, id)
	return append(append(b, actions...), props...)
}

// bucketProp is an 8-byte bucket property of typ holding v (a weight in
// its first 2 bytes, a watch in all 4).
func bucketProp(typ uint16, v uint32, width int) []byte {
	p := binary.BigEndian.AppendUint16(nil, typ)
	p = binary.BigEndian.AppendUint16(p, 8)
	if width == 2 {
		return append(binary.BigEndian.AppendUint16(p, uint16(v)), 0, 0)
	}
	return binary.BigEndian.AppendUint32(p, v)
}

func TestNextBucket(t *testing.T) {
	out := []byte{0, 0, 0, 16, 0, 0, 0, 1, 0xff, 0xe5, 0, 0, 0, 0, 0, 0} // output:1
	props := slices.Concat(bucketProp(BucketPropWeight, 7, 2), bucketProp(BucketPropWatchPort, 3, 4))
	arr := slices.Concat(bucket(5, out, props), bucket(6, nil, nil))
	bk, rest, err := NextBucket(arr)
	if err != nil || bk.ID != 5 || !bytes.Equal(bk.Actions, out) || !bytes.Equal(bk.Props, props) || len(bk.Raw) != 8+16+16 || BucketID(bk.Raw) != 5 {
		t.Fatalf("first bucket = %+v, %v", bk, err)
	}
	bp, err := ReadBucketProps(bk.Props)
	if want := (BucketProps{Weight: 7, HasWeight: true, WatchPort: 3, WatchGroup: WatchAny}); err != nil || bp != want {
		t.Fatalf("ReadBucketProps = %+v, %v; want %+v", bp, err, want)
	}
	if bk, rest, err = NextBucket(rest); err != nil || bk.ID != 6 || len(rest) != 0 || len(bk.Actions) != 0 || len(bk.Props) != 0 {
		t.Fatalf("second bucket = %+v, rest %d, %v", bk, len(rest), err)
	}
	for name, b := range map[string][]byte{
		"truncated":        arr[:7],
		"length past end":  arr[:20],
		"actions past end": bucket(1, nil, nil)[:8:8],
	} {
		if name == "actions past end" {
			binary.BigEndian.PutUint16(b[2:], 8)
		}
		if _, _, err := NextBucket(b); err == nil {
			t.Errorf("%s: NextBucket accepted % x", name, b)
		}
	}
	for name, p := range map[string][]byte{
		"truncated":    {0, 0, 0},
		"not 8 bytes":  {0, 0, 0, 4},
		"unknown type": bucketProp(9, 0, 4),
	} {
		if _, err := ReadBucketProps(p); err == nil || !strings.Contains(err.Error(), "bucket property") {
			t.Errorf("%s: ReadBucketProps = %v, want an error", name, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		for b := arr; len(b) > 0; {
			bk, r, _ := NextBucket(b)
			_, _ = ReadBucketProps(bk.Props)
			b = r
		}
	}); n != 0 {
		t.Errorf("reading buckets allocates %v times", n)
	}
}

func TestReadGroupMod(t *testing.T) {
	g := Group{Type: 1, ID: 42, Buckets: [][]byte{bucket(0, nil, nil)}, Props: []byte{0xff, 0xff, 0, 8, 0, 0, 0, 0}}
	m, err := g.Encode()
	if err != nil {
		t.Fatal(err)
	}
	gm, err := ReadGroupMod(m)
	if err != nil || gm.Command != 0 || gm.Type != 1 || gm.ID != 42 || gm.CommandBucket != BucketAll ||
		!bytes.Equal(gm.Buckets, g.Buckets[0]) || !bytes.Equal(gm.Props, g.Props) {
		t.Fatalf("ReadGroupMod = %+v, %v", gm, err)
	}
	binary.BigEndian.PutUint16(m[offBucketLen:], uint16(len(m)))
	if gm, err = ReadGroupMod(m); err == nil || gm.ID != 42 {
		t.Fatalf("ReadGroupMod of an overrunning bucket array = %+v, %v; want the fixed fields and an error", gm, err)
	}
}

func TestFlowModAccessors(t *testing.T) {
	m := flowModWith(3, 7)
	if FlowModCommand(m) != flowCmdAdd || FlowModTable(m) != 3 || FlowModPriority(m) != 7 || FlowModCookieMask(m) != 0 || FlowModFlags(m) != 0 {
		t.Fatalf("fixed fields of % x", m)
	}
	if idle, hard := FlowModTimeouts(m); idle != 0 || hard != 0 {
		t.Fatalf("timeouts %d, %d", idle, hard)
	}
	if port, group := FlowModOut(WithFlowOut(m, 1, 2)); port != 1 || group != 2 {
		t.Fatalf("out %d, %d", port, group)
	}
	if FlowModCommand(WithFlowCommand(m, flowCmdDelStrict)) != flowCmdDelStrict || FlowModCommand(m) != flowCmdAdd {
		t.Fatal("WithFlowCommand changed the original or not the copy")
	}
	fields, ok := FlowModMatchFields(m)
	if !ok || !bytes.Equal(fields, []byte{0x80, 0x00, 0x0a, 0x02, 0x08, 0x00}) {
		t.Fatalf("match fields % x, %v", fields, ok)
	}
	// The probe of a flow's identity is its ADD without instructions.
	probe := FlowProbe(3, 7, fields)
	if want := flowModWith(3, 7); !bytes.Equal(probe, want) {
		t.Fatalf("FlowProbe = % x\nwant       % x", probe, want)
	}
	if del := DeleteFlowByMatch(3, 7, FlowMatch(m)); !bytes.Equal(WithFlowCommand(del, flowCmdAdd), probe) {
		t.Fatalf("DeleteFlowByMatch = % x, want the probe's delete", del)
	}
	id, err := FlowID(m)
	if err != nil || FlowTable(id) != 3 || FlowPriority(id) != 7 {
		t.Fatalf("FlowID = % x, %v", id, err)
	}
}
