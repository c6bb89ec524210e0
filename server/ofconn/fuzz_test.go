package ofconn

import (
	"bytes"
	"testing"

	"antrea.io/libOpenflow/openflow15"
)

func addDumped(f *testing.F, entries []dumped) {
	for _, e := range entries {
		f.Add(unhex(f, e.hex))
	}
}

// FuzzDecodeFlow: a flow entry never crashes the decoder; a flow is decoded or has an error, never both; and
// the FLOW_MOD built from the decoded flow equals the one built from the raw bytes.
func FuzzDecodeFlow(f *testing.F) {
	addDumped(f, dumpedFlows)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < minFlowDesc {
			return
		}
		fl := decodeFlow(raw)
		if (fl.Desc == nil) == (fl.Err == nil) {
			t.Fatalf("Desc %v and Err %v", fl.Desc, fl.Err)
		}
		fromRaw, rawErr := fl.FlowMod()
		if fl.Desc == nil {
			return
		}
		if rawErr != nil {
			t.Fatalf("decoded flow, but FlowMod from raw: %v", rawErr)
		}
		fromDesc, err := FlowModFromDesc(fl.Desc).MarshalBinary()
		if err != nil {
			t.Fatalf("decoded flow does not encode: %v", err)
		}
		if !bytes.Equal(fromDesc, fromRaw) {
			t.Fatalf("FLOW_MOD from raw and from Desc differ:\nraw  %x\ndesc %x", fromRaw, fromDesc)
		}
	})
}

// FuzzDecodeGroupMeter: group and meter entries never crash the decoders, and their raw and decoded forms agree.
func FuzzDecodeGroupMeter(f *testing.F) {
	addDumped(f, dumpedGroups)
	addDumped(f, dumpedMeters)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) >= minGroupDesc {
			g := decodeGroup(raw)
			if (g.Desc == nil) == (g.Err == nil) {
				t.Fatalf("group: Desc %v and Err %v", g.Desc, g.Err)
			}
			if g.Desc != nil {
				fromRaw, err := g.GroupMod()
				fromDesc, err2 := GroupModFromDesc(g.Desc).MarshalBinary()
				if err != nil || err2 != nil || !bytes.Equal(fromRaw, fromDesc) {
					t.Fatalf("GROUP_MOD from raw %x (%v) and from Desc %x (%v) differ", fromRaw, err, fromDesc, err2)
				}
			}
		}
		if len(raw) >= minMeterDesc {
			m := decodeMeter(raw)
			if (m.Desc == nil) == (m.Err == nil) {
				t.Fatalf("meter: Desc %v and Err %v", m.Desc, m.Err)
			}
			if m.Desc != nil {
				fromRaw, err := m.MeterMod()
				fromDesc, err2 := MeterModFromDesc(m.Desc).MarshalBinary()
				if err != nil || err2 != nil || !bytes.Equal(fromRaw, fromDesc) {
					t.Fatalf("METER_MOD from raw %x (%v) and from Desc %x (%v) differ", fromRaw, err, fromDesc, err2)
				}
			}
		}
	})
}

// FuzzSplitEntries: a multipart reply never crashes the splitter, and entries it hands out are in bounds.
func FuzzSplitEntries(f *testing.F) {
	entry := unhex(f, dumpedFlows[2].hex)
	f.Add(multipartReply(openflow15.MultipartType_FlowDesc, true, entry, entry))
	f.Add(multipartReply(openflow15.MultipartType_FlowDesc, false))
	f.Add(multipartReply(openflow15.MultipartType_MeterDesc, false, unhex(f, dumpedMeters[0].hex)))
	f.Fuzz(func(t *testing.T, reply []byte) {
		if len(reply) < headerLen {
			return
		}
		total := 0
		_, err := splitEntries(reply, openflow15.MultipartType_FlowDesc, minFlowDesc, func(raw []byte) error {
			if len(raw) < minFlowDesc || int(be.Uint16(raw)) != len(raw) {
				t.Fatalf("entry of %d bytes handed out", len(raw))
			}
			total += len(raw)
			_ = decodeFlow(raw)
			return nil
		})
		if err == nil && total != len(reply)-headerLen-8 {
			t.Fatalf("entries cover %d of %d bytes", total, len(reply)-headerLen-8)
		}
	})
}

// FuzzSwitchMessages: HELLO and ERROR parsing never crash.
func FuzzSwitchMessages(f *testing.F) {
	hello, err := helloMsg(1)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hello)
	f.Add(controlMsg(openflow15.Type_Error, 1, []byte{0, 2, 0, 4, 1, 2, 3}))
	f.Add(controlMsg(openflow15.Type_Error, 1, []byte{0xff, 0xff, 0, 4, 0, 0, 0x23, 0x20}))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) < headerLen {
			return
		}
		peerSpeaks15(msg)
		e := decodeError(msg)
		if e.Name == "" {
			t.Fatal("error without a name")
		}
		var hdr [headerLen]byte
		if fr, err := readFrame(bytes.NewReader(msg), &hdr); err == nil && len(fr) != int(be.Uint16(msg[2:4])) {
			t.Fatalf("frame of %d bytes for length %d", len(fr), be.Uint16(msg[2:4]))
		}
	})
}
