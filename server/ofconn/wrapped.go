package ofconn

import (
	"bufio"
	"fmt"
	"io"

	"antrea.io/libOpenflow/openflow15"
)

// OVS 3.1 sends a group description larger than 64 KiB (a group of about
// 800 or more buckets) in a multipart reply of its own whose 16-bit lengths
// (message, entry, bucket list) have wrapped: the bytes on the wire are the
// whole group, the header claims the length modulo 65536. ovs-ofctl itself
// cannot read it. Read as the header says, the rest of the group would be
// taken for the next messages and the connection lost, on every dump.
//
// So a GROUP_DESC reply is checked before it is handed out: its last
// entry's buckets (each with a length of its own, never wrapped) must end
// where the wrapped bucket list length says and be followed by nothing or by
// group properties that end with the message. While they do not, 65536 more
// bytes belong to the message. Where the buckets happen to end right at the
// wrapped end, the next bytes decide: they must start an OpenFlow message.
// They always come, because DumpGroups sends a barrier after its request.
//
// The reply keeps its wrapped lengths; splitEntries and entry.GroupFromDesc
// read them modulo 65536.

// maxWrappedReply bounds a group description: 16 MiB, far above the
// largest group an entry holds.
const maxWrappedReply = 16 << 20

// maxMessageType is the highest OpenFlow 1.5 message type (CONTROLLER_STATUS).
const maxMessageType = 35

// isGroupDescReply reports whether f is a GROUP_DESC multipart reply.
func isGroupDescReply(f []byte) bool {
	return len(f) >= headerLen+8 && f[1] == openflow15.Type_MultiPartReply &&
		be.Uint16(f[8:10]) == openflow15.MultipartType_GroupDesc
}

// completeGroupDesc reads the rest of a GROUP_DESC reply whose lengths have
// wrapped, if they have.
func completeGroupDesc(br *bufio.Reader, f []byte) ([]byte, error) {
	for {
		if groupDescComplete(f) {
			next, err := br.Peek(headerLen)
			if err != nil || startsMessage(next) {
				return f, nil // a read error is the read loop's to report
			}
		}
		if len(f)+0x10000 > maxWrappedReply {
			return nil, fmt.Errorf("ofconn: group description reply of more than %d bytes", maxWrappedReply)
		}
		more := make([]byte, len(f)+0x10000)
		copy(more, f)
		if _, err := io.ReadFull(br, more[len(f):]); err != nil {
			return nil, fmt.Errorf("ofconn: reading a group description longer than its length field: %w", err)
		}
		f = more
	}
}

// groupDescComplete reports whether the last group of reply f ends with f.
// A malformed reply counts as complete: the dump reports it.
func groupDescComplete(f []byte) bool {
	body := f[headerLen+8:]
	for len(body) >= minGroupDesc {
		n := int(be.Uint16(body))
		if n != len(body)&0xffff {
			if n < minGroupDesc || n > len(body) {
				return true
			}
			body = body[n:]
			continue
		}
		return bucketsEnd(body)
	}
	return true
}

// bucketsEnd reports whether the buckets of group description g end where
// its bucket list length says, modulo 65536, followed by nothing or by
// properties that fill the rest of g exactly.
func bucketsEnd(g []byte) bool {
	want := int(be.Uint16(g[8:10]))
	rest := g[minGroupDesc:]
	for walked := 0; ; {
		if walked&0xffff == want && propsFill(rest[walked:]) {
			return true
		}
		if walked+8 > len(rest) {
			return false
		}
		n := int(be.Uint16(rest[walked:]))
		if n < 8 {
			return true // malformed: not ours to repair
		}
		walked += n
		if walked > len(rest) {
			return false
		}
	}
}

// propsFill reports whether b is empty or group properties (experimenter,
// type 0xffff, with 8-byte-aligned lengths) that fill it exactly.
func propsFill(b []byte) bool {
	for len(b) > 0 {
		if len(b) < 4 || be.Uint16(b) != 0xffff {
			return false
		}
		n := (int(be.Uint16(b[2:])) + 7) &^ 7
		if n < 4 || n > len(b) {
			return false
		}
		b = b[n:]
	}
	return true
}

// startsMessage reports whether h is the header of an OpenFlow 1.5 message
// rather than the middle of a bucket.
func startsMessage(h []byte) bool {
	return h[0] == openflow15.VERSION && h[1] <= maxMessageType && be.Uint16(h[2:4]) >= headerLen
}
