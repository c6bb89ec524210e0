package ofconn

import (
	"encoding/binary"
	"fmt"
	"io"

	"antrea.io/libOpenflow/common"
	"antrea.io/libOpenflow/openflow15"
)

var be = binary.BigEndian

const (
	headerLen = 8
	// bundleAddHeaderLen is ofp_bundle_add_msg without its inner message: header, bundle_id, pad, flags.
	bundleAddHeaderLen = 16
	// MaxMessage is the largest OpenFlow message: its length field is 16 bits.
	MaxMessage = 0xffff
	// MaxBundledMessage is the largest message that fits in a BUNDLE_ADD (65535 minus its 16-byte header).
	MaxBundledMessage = MaxMessage - bundleAddHeaderLen
)

// Message is one encoded OpenFlow 1.5 message (FLOW_MOD, GROUP_MOD, METER_MOD...). Its xid does not matter:
// ofconn writes its own on the wire and never modifies the slice.
type Message []byte

// Type returns the OpenFlow message type (header byte 1), or 0xff for a message shorter than a header.
func (m Message) Type() uint8 {
	if len(m) < headerLen {
		return 0xff
	}
	return m[1]
}

// check verifies that m is one well-formed OpenFlow 1.5 message of at most limit bytes.
func (m Message) check(limit int) error {
	if len(m) > limit {
		return fmt.Errorf("%w: %d bytes (%s), the limit is %d", ErrTooLarge, len(m), TypeName(m.Type()), limit)
	}
	if len(m) < headerLen {
		return fmt.Errorf("%w: %d bytes is shorter than an OpenFlow header", ErrMalformed, len(m))
	}
	if m[0] != openflow15.VERSION {
		return fmt.Errorf("%w: version %d, want %d (OpenFlow 1.5)", ErrMalformed, m[0], openflow15.VERSION)
	}
	if n := int(be.Uint16(m[2:4])); n != len(m) {
		return fmt.Errorf("%w: length field %d but %d bytes (%s)", ErrMalformed, n, len(m), TypeName(m.Type()))
	}
	switch m[1] {
	case openflow15.Type_Hello, openflow15.Type_EchoRequest, openflow15.Type_EchoReply,
		openflow15.Type_BarrierRequest, openflow15.Type_BarrierReply,
		openflow15.Type_BundleControl, openflow15.Type_BundleAddMessage:
		// These belong to the channel itself; letting a caller send them would confuse its replies.
		return fmt.Errorf("%w: %s is managed by ofconn", ErrMalformed, TypeName(m[1]))
	}
	return nil
}

// putHeader writes an OpenFlow 1.5 header into b[:8].
func putHeader(b []byte, typ uint8, length int, xid uint32) {
	b[0] = openflow15.VERSION
	b[1] = typ
	be.PutUint16(b[2:4], uint16(length))
	be.PutUint32(b[4:8], xid)
}

// controlMsg encodes a header-only message (barrier, echo request) or one with a small body.
func controlMsg(typ uint8, xid uint32, body []byte) []byte {
	b := make([]byte, headerLen+len(body))
	putHeader(b, typ, len(b), xid)
	copy(b[headerLen:], body)
	return b
}

// bundleCtrlMsg encodes an ofp_bundle_ctrl_msg without properties.
func bundleCtrlMsg(xid, bundleID uint32, ctrlType, flags uint16) ([]byte, error) {
	m := openflow15.NewBundleCtrl(bundleID, ctrlType, flags)
	m.Header.Xid = xid
	return m.MarshalBinary()
}

// putBundleAddHeader writes the 16 bytes that precede the inner message of an ofp_bundle_add_msg. The add's
// xid must equal the inner message's: OVS rejects the add otherwise (OFPBFC_MSG_BAD_XID).
func putBundleAddHeader(b []byte, innerLen int, xid, bundleID uint32, flags uint16) {
	putHeader(b, openflow15.Type_BundleAddMessage, bundleAddHeaderLen+innerLen, xid)
	be.PutUint32(b[8:12], bundleID)
	b[12], b[13] = 0, 0
	be.PutUint16(b[14:16], flags)
}

// readFrame reads one OpenFlow message into a fresh slice.
func readFrame(r io.Reader, hdr *[headerLen]byte) ([]byte, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(be.Uint16(hdr[2:4]))
	if n < headerLen {
		return nil, fmt.Errorf("ofconn: malformed message from switch: length %d (type %d)", n, hdr[1])
	}
	b := make([]byte, n)
	copy(b, hdr[:])
	if _, err := io.ReadFull(r, b[headerLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

func frameXid(b []byte) uint32 { return be.Uint32(b[4:8]) }

var typeNames = [...]string{
	0: "HELLO", 1: "ERROR", 2: "ECHO_REQUEST", 3: "ECHO_REPLY", 4: "EXPERIMENTER",
	5: "FEATURES_REQUEST", 6: "FEATURES_REPLY", 7: "GET_CONFIG_REQUEST", 8: "GET_CONFIG_REPLY", 9: "SET_CONFIG",
	10: "PACKET_IN", 11: "FLOW_REMOVED", 12: "PORT_STATUS", 13: "PACKET_OUT", 14: "FLOW_MOD", 15: "GROUP_MOD",
	16: "PORT_MOD", 17: "TABLE_MOD", 18: "MULTIPART_REQUEST", 19: "MULTIPART_REPLY", 20: "BARRIER_REQUEST",
	21: "BARRIER_REPLY", 24: "ROLE_REQUEST", 25: "ROLE_REPLY", 26: "GET_ASYNC_REQUEST", 27: "GET_ASYNC_REPLY",
	28: "SET_ASYNC", 29: "METER_MOD", 30: "ROLE_STATUS", 31: "TABLE_STATUS", 32: "REQUESTFORWARD",
	33: "BUNDLE_CONTROL", 34: "BUNDLE_ADD_MESSAGE", 35: "CONTROLLER_STATUS",
}

// TypeName returns the name of an OpenFlow 1.5 message type without the OFPT_ prefix, e.g. "FLOW_MOD".
func TypeName(t uint8) string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("TYPE_%d", t)
}

// ReadMessage reads one OpenFlow message of any version from r, for relays
// that pass messages on without decoding them. A length below the header's
// is an error: the stream cannot be resynchronised after it.
func ReadMessage(r io.Reader) ([]byte, error) {
	var hdr [headerLen]byte
	return readFrame(r, &hdr)
}

// HelloVersions returns the OpenFlow versions a HELLO offers, as a bitmap
// (bit N set: wire version N): its version bitmap element when it carries
// one, else every version up to its header's (the highest the peer speaks).
func HelloVersions(f []byte) uint32 {
	if len(f) < headerLen {
		return 0
	}
	for b := f[headerLen:]; len(b) >= 4; {
		typ, n := be.Uint16(b[0:2]), int(be.Uint16(b[2:4]))
		if n < 4 || n > len(b) {
			break
		}
		if typ == common.HelloElemType_VersionBitmap {
			if n < 8 {
				return 0
			}
			// Versions above 31 would be in later words; none exist.
			return be.Uint32(b[4:8])
		}
		padded := (n + 7) / 8 * 8
		if padded > len(b) {
			break
		}
		b = b[padded:]
	}
	if f[0] >= 32 {
		return 0
	}
	return (1<<(f[0]+1) - 1) &^ 1
}
