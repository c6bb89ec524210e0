package ofctl

import (
	"encoding/binary"
	"strconv"
	"strings"
)

// enqueue:P:Q (or enqueue(P,Q)) is OpenFlow 1.0's action. In OpenFlow 1.1
// and later OVS sends it as three actions, set_queue:Q, an output to P
// with max_len 65535 and pop_queue, and vswitchd dumps those bytes as they
// came. ovs-ofctl prints them as set_queue:Q,output:P,pop_queue, which
// reads back with max_len 0, so FormatFlow prints the three as enqueue:P:Q
// instead: the one text that reads back to the same bytes.

// parseEnqueue parses enqueue:PORT:QUEUE or enqueue(PORT,QUEUE) as OVS
// does: the port and the queue split at the first ':', 'q' or ',', the
// port a physical one, IN_PORT or LOCAL.
func (cx *actx) parseEnqueue(p kv) ([][]byte, error) {
	i := strings.IndexAny(p.val, ":q,")
	if p.delim == 0 || i <= 0 || i == len(p.val)-1 {
		return nil, errAt(p.keyOff, p.text(), `"enqueue" syntax is "enqueue:PORT:QUEUE" or "enqueue(PORT,QUEUE)"`)
	}
	port, err := parsePort(p.val[:i])
	if err != nil {
		return nil, errAt(p.valOff, p.val[:i], "enqueue to unknown port")
	}
	if port >= portMax && port != portInPort && port != portLocal {
		return nil, errAt(p.valOff, p.val[:i], "bad enqueue port (want a physical port, IN_PORT or LOCAL)")
	}
	q, err := parseUint(p.val[i+1:], 32)
	if err != nil {
		return nil, errAt(p.valOff+i+1, p.val[i+1:], "bad queue id (want a 32-bit number)")
	}
	out, err := cx.outputPort(p, port, 0xffff)
	if err != nil {
		return nil, err
	}
	return [][]byte{action32(ofpatSetQueue, uint32(q)), out, popQueue()}, nil
}

// popQueue encodes NXAST_POP_QUEUE.
func popQueue() []byte {
	return setLen16(append(nxHeader(nxastPopQueue), make([]byte, 6)...))
}

// formatEnqueue prints acts[0:3] as enqueue:P:Q when they are the three
// actions OVS sends for it, and reports whether it did.
func formatEnqueue(acts [][]byte) (string, bool) {
	if len(acts) < 3 {
		return "", false
	}
	sq, out, pop := acts[0], acts[1], acts[2]
	if len(sq) != 8 || binary.BigEndian.Uint16(sq) != ofpatSetQueue ||
		len(out) != 16 || binary.BigEndian.Uint16(out) != ofpatOutput || binary.BigEndian.Uint16(out[8:]) != 0xffff ||
		!isNX(pop, nxastPopQueue) || len(pop) != 16 {
		return "", false
	}
	port, ok := port10(binary.BigEndian.Uint32(out[4:]))
	if !ok || port >= portMax && port != portInPort && port != portLocal {
		return "", false
	}
	return "enqueue:" + formatPort(port) + ":" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(sq[4:])), 10), true
}
