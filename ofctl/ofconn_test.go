package ofctl

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// flowStat is one entry of an OpenFlow 1.5 flow-stats (FLOW_DESC) reply,
// reduced to what identifies and defines a flow.
type flowStat struct {
	table                            uint8
	priority, idle, hard, flags, imp uint16
	cookie                           uint64
	match, instructions              []byte // match with its ofp_match header and padding
	raw                              []byte // the whole flow-stats entry, when read from a switch
}

// key identifies a flow as OVS does with --strict: table, priority, match.
func (f flowStat) key() string {
	return fmt.Sprintf("%d/%d/%x", f.table, f.priority, f.match)
}

// statFromFlowMod extracts the same fields from an encoded FLOW_MOD.
func statFromFlowMod(b []byte) (flowStat, error) {
	if len(b) < 56 {
		return flowStat{}, fmt.Errorf("flow mod too short")
	}
	mlen := int(binary.BigEndian.Uint16(b[50:]))
	end := 48 + (mlen+7)/8*8
	if end > len(b) {
		return flowStat{}, fmt.Errorf("bad match length")
	}
	return flowStat{
		cookie: binary.BigEndian.Uint64(b[8:]), table: b[24],
		idle: binary.BigEndian.Uint16(b[26:]), hard: binary.BigEndian.Uint16(b[28:]),
		priority: binary.BigEndian.Uint16(b[30:]), flags: binary.BigEndian.Uint16(b[44:]),
		imp: binary.BigEndian.Uint16(b[46:]), match: b[48:end], instructions: b[end:],
	}, nil
}

func readOFMsg(r io.Reader) ([]byte, error) {
	h := make([]byte, 8)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(h[2:]))
	if n < 8 {
		return nil, fmt.Errorf("bad OpenFlow length %d", n)
	}
	b := make([]byte, n)
	copy(b, h)
	_, err := io.ReadFull(r, b[8:])
	return b, err
}

// multipart sends one OpenFlow 1.5 multipart request of type mpType with
// body to the switch at the unix socket path, after a raw hello, and returns
// the bodies of all reply messages, so tests see exactly the bytes vswitchd
// sends.
func multipart(ctx context.Context, path string, mpType uint16, body []byte) ([][]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte{6, 0, 0, 8, 0, 0, 0, 1}); err != nil {
		return nil, err
	}
	hello, err := readOFMsg(c)
	if err != nil {
		return nil, err
	}
	if hello[0] != 6 || hello[1] != 0 {
		return nil, fmt.Errorf("switch answered version %d type %d, want an OpenFlow 1.5 hello", hello[0], hello[1])
	}
	req := make([]byte, 16, 16+len(body))
	req[0], req[1] = 6, 18 // OFPT_MULTIPART_REQUEST
	binary.BigEndian.PutUint32(req[4:], 2)
	binary.BigEndian.PutUint16(req[8:], mpType)
	req = append(req, body...)
	binary.BigEndian.PutUint16(req[2:], uint16(len(req)))
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		m, err := readOFMsg(c)
		if err != nil {
			return nil, err
		}
		switch {
		case m[1] == 1: // OFPT_ERROR
			return nil, fmt.Errorf("switch error %x", m)
		case m[1] != 19 || binary.BigEndian.Uint32(m[4:]) != 2:
			continue
		}
		out = append(out, m[16:])
		if binary.BigEndian.Uint16(m[10:])&1 == 0 { // no REPLY_MORE
			return out, nil
		}
	}
}

// entries splits a multipart reply body into entries whose 16-bit length
// is at offset 0.
func entries(bodies [][]byte) ([][]byte, error) {
	var out [][]byte
	for _, body := range bodies {
		for len(body) > 0 {
			if len(body) < 8 {
				return nil, fmt.Errorf("truncated entry")
			}
			n := int(binary.BigEndian.Uint16(body))
			if n < 8 || n > len(body) {
				return nil, fmt.Errorf("bad entry length %d", n)
			}
			out = append(out, body[:n])
			body = body[n:]
		}
	}
	return out, nil
}

// dumpFlowStats reads every flow of the switch (FLOW_DESC).
func dumpFlowStats(ctx context.Context, path string) ([]flowStat, error) {
	req := make([]byte, 40)
	req[0] = 0xff // all tables
	binary.BigEndian.PutUint32(req[4:], 0xffffffff)
	binary.BigEndian.PutUint32(req[8:], 0xffffffff)
	binary.BigEndian.PutUint16(req[32:], 1) // empty OXM match
	binary.BigEndian.PutUint16(req[34:], 4)
	bodies, err := multipart(ctx, path, 1, req)
	if err != nil {
		return nil, err
	}
	es, err := entries(bodies)
	if err != nil {
		return nil, err
	}
	var out []flowStat
	for _, e := range es {
		if len(e) < 40 {
			return nil, fmt.Errorf("truncated flow stats")
		}
		mlen := int(binary.BigEndian.Uint16(e[26:]))
		mend := 24 + (mlen+7)/8*8
		slen := int(binary.BigEndian.Uint16(e[mend+2:]))
		iend := mend + (slen+7)/8*8
		out = append(out, flowStat{
			table: e[4], priority: binary.BigEndian.Uint16(e[6:]),
			idle: binary.BigEndian.Uint16(e[8:]), hard: binary.BigEndian.Uint16(e[10:]),
			flags: binary.BigEndian.Uint16(e[12:]), imp: binary.BigEndian.Uint16(e[14:]),
			cookie: binary.BigEndian.Uint64(e[16:]), match: e[24:mend], instructions: e[iend:], raw: e,
		})
	}
	return out, nil
}

// dumpGroupDescs reads every group (GROUP_DESC) as its GROUP_MOD body would
// be: type, group id and buckets, keyed by group id.
func dumpGroupDescs(ctx context.Context, path string) (map[uint32][]byte, error) {
	bodies, err := multipart(ctx, path, 7, []byte{0xff, 0xff, 0xff, 0xfc, 0, 0, 0, 0})
	if err != nil {
		return nil, err
	}
	es, err := entries(bodies)
	if err != nil {
		return nil, err
	}
	out := map[uint32][]byte{}
	for _, e := range es {
		if len(e) < 16 {
			return nil, fmt.Errorf("truncated group desc")
		}
		// type, group id, bucket list length, then buckets and properties.
		out[binary.BigEndian.Uint32(e[4:])] = append([]byte{e[2]}, e[8:10:10]...)
		out[binary.BigEndian.Uint32(e[4:])] = append(out[binary.BigEndian.Uint32(e[4:])], e[16:]...)
	}
	return out, nil
}

// groupModKey reduces an encoded GROUP_MOD to what dumpGroupDescs returns.
func groupModKey(b []byte) (uint32, []byte) {
	return binary.BigEndian.Uint32(b[12:]), append(append([]byte{b[10]}, b[16:18]...), b[24:]...)
}

// dumpMeterConfigs reads every meter (METER_CONFIG) as flags and bands,
// keyed by meter id.
func dumpMeterConfigs(ctx context.Context, path string) (map[uint32][]byte, error) {
	bodies, err := multipart(ctx, path, 10, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	if err != nil {
		return nil, err
	}
	es, err := entries(bodies)
	if err != nil {
		return nil, err
	}
	out := map[uint32][]byte{}
	for _, e := range es {
		out[binary.BigEndian.Uint32(e[4:])] = append(append([]byte(nil), e[2:4]...), e[8:]...)
	}
	return out, nil
}

// meterModKey reduces an encoded METER_MOD to what dumpMeterConfigs returns.
func meterModKey(b []byte) (uint32, []byte) {
	return binary.BigEndian.Uint32(b[12:]), append(append([]byte(nil), b[10:12]...), b[16:]...)
}
