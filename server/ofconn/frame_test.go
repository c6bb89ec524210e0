package ofconn

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"antrea.io/libOpenflow/common"
	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"
)

func TestErrorName(t *testing.T) {
	for _, tc := range []struct {
		typ, code uint16
		exp       uint32
		want      string
	}{
		{2, 4, 0, "OFPBAC_BAD_OUT_PORT"},
		{3, 2, 0, "OFPBIC_BAD_TABLE_ID"},
		{5, 1, 0, "OFPFMFC_TABLE_FULL"},
		{17, 13, 0, "OFPBFC_MSG_FAILED"},
		{17, 9, 0, "OFPBFC_MSG_BAD_XID"},
		{1, 0, 0, "OFPBRC_BAD_VERSION"},
		{13, 5, 0, "OFPTFFC_EPERM"},
		{13, 3, 0, "OFPET_TABLE_FEATURES_FAILED(code=3)"},
		{2, 200, 0, "OFPET_BAD_ACTION(code=200)"},
		{99, 1, 0, "OFPET_99(code=1)"},
		{0xffff, 7, 0x2320, "OFPET_EXPERIMENTER(NX,code=7)"},
		{0xffff, 39, 0x2320, "NXBAC_BAD_HEADER_TYPE"},
		{0xffff, 37, 0x2320, "NXFMFC_INVALID_TLV_FIELD"},
		{0xffff, 7, 0x12345678, "OFPET_EXPERIMENTER(0x12345678,code=7)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := ErrorName(tc.typ, tc.code, tc.exp); got != tc.want {
				t.Errorf("ErrorName(%d, %d, %#x) = %q, want %q", tc.typ, tc.code, tc.exp, got, tc.want)
			}
		})
	}
}

func TestDecodeError(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		want OFError
	}{
		{"standard", []byte{0, 2, 0, 4, 0xaa, 0xbb}, OFError{Type: 2, Code: 4, Name: "OFPBAC_BAD_OUT_PORT", Data: []byte{0xaa, 0xbb}}},
		{"experimenter", []byte{0xff, 0xff, 0, 1, 0, 0, 0x23, 0x20, 0xcc},
			OFError{Type: 0xffff, Code: 1, Experimenter: 0x2320, Name: "OFPET_EXPERIMENTER(NX,code=1)", Data: []byte{0xcc}}},
		{"short", []byte{0, 2}, OFError{Name: "malformed OFPT_ERROR", Data: []byte{0, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decodeError(controlMsg(openflow15.Type_Error, 9, tc.body))
			if got.Type != tc.want.Type || got.Code != tc.want.Code || got.Experimenter != tc.want.Experimenter ||
				got.Name != tc.want.Name || !bytes.Equal(got.Data, tc.want.Data) {
				t.Errorf("decodeError = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMessageCheck(t *testing.T) {
	msg := func(size int, typ uint8) Message {
		m := make(Message, size)
		putHeader(m, typ, size, 1)
		return m
	}
	wrongVersion := msg(16, openflow15.Type_FlowMod)
	wrongVersion[0] = 4
	for _, tc := range []struct {
		name  string
		m     Message
		limit int
		want  error
	}{
		{"flow mod", msg(56, openflow15.Type_FlowMod), MaxBundledMessage, nil},
		{"largest bundled", msg(MaxBundledMessage, openflow15.Type_FlowMod), MaxBundledMessage, nil},
		{"one byte too many", msg(MaxBundledMessage+1, openflow15.Type_FlowMod), MaxBundledMessage, ErrTooLarge},
		{"largest unbundled", msg(MaxMessage, openflow15.Type_MeterMod), MaxMessage, nil},
		{"wrapped length", make(Message, 70000), MaxMessage, ErrTooLarge},
		{"short", Message{6, 14, 0}, MaxMessage, ErrMalformed},
		{"wrong version", wrongVersion, MaxMessage, ErrMalformed},
		{"length mismatch", append(msg(16, openflow15.Type_FlowMod), 0), MaxMessage, ErrMalformed},
		{"barrier", msg(8, openflow15.Type_BarrierRequest), MaxMessage, ErrMalformed},
		{"bundle add", msg(24, openflow15.Type_BundleAddMessage), MaxMessage, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.check(tc.limit)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("check = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestBundleAddHeader checks the hand-written BUNDLE_ADD framing against libOpenflow's encoder.
func TestBundleAddHeader(t *testing.T) {
	inner := encode(t, applyActions(ipFlow(0, 100, 1), output(2)))
	const xid, id = 0x01020304, 77
	add := openflow15.NewBndleAdd(id, bundleFlags)
	add.Header.Xid = xid
	innerCopy := bytes.Clone(inner)
	be.PutUint32(innerCopy[4:8], xid)
	add.Message = util.NewBuffer(innerCopy)
	want, err := add.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, bundleAddHeaderLen, bundleAddHeaderLen+len(inner))
	putBundleAddHeader(got, len(inner), xid, id, bundleFlags)
	got = append(got, innerCopy...)
	if !bytes.Equal(got, want) {
		t.Errorf("bundle add:\ngot  %x\nwant %x", got, want)
	}
}

func TestHello(t *testing.T) {
	ours, err := helloMsg(5)
	if err != nil {
		t.Fatal(err)
	}
	if !peerSpeaks15(ours) {
		t.Errorf("our own hello %x does not offer OpenFlow 1.5", ours)
	}
	hello := func(version uint8, bitmap ...uint32) []byte {
		h, err := common.NewHello(int(version))
		if err != nil {
			t.Fatal(err)
		}
		h.Elements = nil
		if bitmap != nil {
			bm := common.NewHelloElemVersionBitmap()
			bm.Bitmaps = bitmap
			bm.Length = bm.Len()
			h.Elements = append(h.Elements, bm)
		}
		b, err := h.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		want bool
	}{
		{"1.0-1.5", hello(6, 0b1111110), true},
		{"1.3 only", hello(4, 1<<4), false},
		{"1.0 and 1.3", hello(4, 1<<1|1<<4), false},
		{"1.5 without bitmap", hello(6), true},
		{"1.3 without bitmap", hello(4), false},
		{"1.6 with 1.5 in its bitmap", hello(7, 1<<6|1<<7), true},
		{"truncated element", append(hello(4), 0, 1, 0, 8), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := peerSpeaks15(tc.msg); got != tc.want {
				t.Errorf("peerSpeaks15(%x) = %v, want %v", tc.msg, got, tc.want)
			}
		})
	}
}

func TestReadFrame(t *testing.T) {
	var hdr [headerLen]byte
	two := append(controlMsg(openflow15.Type_BarrierReply, 1, nil), controlMsg(openflow15.Type_EchoReply, 2, []byte{1, 2, 3})...)
	r := bytes.NewReader(two)
	for _, want := range []uint32{1, 2} {
		f, err := readFrame(r, &hdr)
		if err != nil || frameXid(f) != want {
			t.Fatalf("readFrame = %x, %v; want xid %d", f, err, want)
		}
	}
	if _, err := readFrame(r, &hdr); !errors.Is(err, io.EOF) {
		t.Errorf("readFrame at the end = %v, want EOF", err)
	}
	if _, err := readFrame(bytes.NewReader(two[8:18]), &hdr); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("readFrame of a truncated message = %v, want ErrUnexpectedEOF", err)
	}
	if _, err := readFrame(bytes.NewReader([]byte{6, 0, 0, 4, 0, 0, 0, 0}), &hdr); err == nil {
		t.Error("readFrame accepted a length shorter than the header")
	}
}

// multipartReply encodes a multipart reply holding entries.
func multipartReply(mpType uint16, more bool, entries ...[]byte) []byte {
	body := make([]byte, 8)
	be.PutUint16(body[0:2], mpType)
	if more {
		be.PutUint16(body[2:4], openflow15.OFPMPF_REPLY_MORE)
	}
	for _, e := range entries {
		body = append(body, e...)
	}
	return controlMsg(openflow15.Type_MultiPartReply, 1, body)
}

func TestSplitEntries(t *testing.T) {
	entry := func(n int) []byte {
		e := make([]byte, n)
		be.PutUint16(e, uint16(n))
		return e
	}
	for _, tc := range []struct {
		name     string
		reply    []byte
		sizes    []int
		more     bool
		wantFail bool
	}{
		{"empty last", multipartReply(10, false), nil, false, false},
		{"two entries, more", multipartReply(10, true, entry(8), entry(16)), []int{8, 16}, true, false},
		{"wrong type", multipartReply(7, false, entry(8)), nil, false, true},
		{"entry too long", multipartReply(10, false, entry(8)[:6]), nil, false, true},
		{"zero length entry", multipartReply(10, false, make([]byte, 8)), nil, false, true},
		{"short reply", controlMsg(openflow15.Type_MultiPartReply, 1, []byte{0, 10}), nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sizes []int
			more, err := splitEntries(tc.reply, 10, 8, func(raw []byte) error {
				sizes = append(sizes, len(raw))
				return nil
			})
			if (err != nil) != tc.wantFail {
				t.Fatalf("splitEntries error = %v, want failure %v", err, tc.wantFail)
			}
			if err == nil && (more != tc.more || len(sizes) != len(tc.sizes)) {
				t.Errorf("splitEntries = %v, more %v; want %v, more %v", sizes, more, tc.sizes, tc.more)
			}
		})
	}
}
