package ofproxy

import (
	"encoding/binary"
	"testing"
)

func msg(version, typ uint8, body ...byte) []byte {
	b := make([]byte, 8, 8+len(body))
	b[0], b[1] = version, typ
	b = append(b, body...)
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	return b
}

func nxt(version uint8, subtype uint32) []byte {
	body := make([]byte, 8)
	binary.BigEndian.PutUint32(body[0:4], 0x2320)
	binary.BigEndian.PutUint32(body[4:8], subtype)
	return msg(version, 4, body...)
}

func TestMessageNames(t *testing.T) {
	for _, tc := range []struct {
		m    []byte
		want string
	}{
		{msg(6, 14), "FLOW_MOD"},
		{msg(1, 14), "FLOW_MOD"},
		{msg(6, 20), "BARRIER_REQUEST"},
		{msg(1, 18), "BARRIER_REQUEST"}, // OpenFlow 1.0 numbering
		{msg(4, 18), "MULTIPART_REQUEST"},
		{msg(6, 29), "METER_MOD"},
		{msg(6, 34), "BUNDLE_ADD_MESSAGE"},
		{nxt(6, 30), "NXT_PACKET_IN2"},
		{nxt(6, 24), "NXT_TLV_TABLE_MOD"},
		{nxt(4, 27), "NXT_27"},
		{nxt(6, 1000), "NXT_63_OR_ABOVE"},
		{msg(6, 4, 0, 0, 0, 1, 0, 0, 0, 1), "EXPERIMENTER"}, // another experimenter
		{msg(6, 4), "EXPERIMENTER"},                         // too short for a subtype
		{msg(6, 200), "TYPE_200"},
	} {
		if got := keyOf(tc.m).name(); got != tc.want {
			t.Errorf("name of %x = %q, want %q", tc.m, got, tc.want)
		}
	}
}

func TestTypeCounts(t *testing.T) {
	var c typeCounts
	for _, m := range [][]byte{msg(6, 14), msg(1, 14), msg(1, 18), msg(6, 20), nxt(6, 30)} {
		c.add(keyOf(m))
	}
	got := c.snapshot()
	want := map[string]uint64{"FLOW_MOD": 2, "BARRIER_REQUEST": 2, "NXT_PACKET_IN2": 1}
	if len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
}
