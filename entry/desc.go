package entry

import "fmt"

// ofp_flow_desc and ofp_meter_desc layouts.
const (
	flowDescFixed  = 24
	meterDescFixed = 8
	portAny        = 0xffffffff
	groupAny       = 0xffffffff
)

// FlowFromDesc returns the FLOW_MOD ADD (xid 0) that installs one
// ofp_flow_desc of a dump, built on bytes (never through libOpenflow's
// decoder, which loses MAC addresses and does not know every action): a dump
// is OVS's own form, so nothing in it is re-encoded. Out port and out group
// are ANY and the buffer id NO_BUFFER, as ovs-ofctl sends them.
func FlowFromDesc(raw []byte) ([]byte, error) { return AppendFlowFromDesc(nil, raw) }

// AppendFlowFromDesc is FlowFromDesc into dst's memory when it is large
// enough: a dump of a million flows then needs one buffer, not a million.
func AppendFlowFromDesc(dst, raw []byte) ([]byte, error) {
	if len(raw) < flowDescFixed+8 {
		return nil, fmt.Errorf("flow entry of %d bytes is truncated", len(raw))
	}
	mlen := int(be.Uint16(raw[flowDescFixed+2:]))
	if mlen < 4 || flowDescFixed+pad8(mlen) > len(raw) {
		return nil, fmt.Errorf("flow entry with a bad match length %d", mlen)
	}
	match := raw[flowDescFixed : flowDescFixed+pad8(mlen)]
	statsAt := flowDescFixed + len(match)
	if statsAt+4 > len(raw) {
		return nil, fmt.Errorf("flow entry without stats")
	}
	n := int(be.Uint16(raw[statsAt+2:]))
	instrAt := statsAt + pad8(n)
	if n < 4 || instrAt > len(raw) {
		return nil, fmt.Errorf("flow entry with stats of bad length %d", n)
	}
	instrs := raw[instrAt:]
	size := flowModFixed + len(match) + len(instrs)
	if size > MaxMessage {
		return nil, fmt.Errorf("flow of %d bytes exceeds the %d-byte limit", size, MaxMessage)
	}
	m := dst[:0]
	if cap(m) < size {
		m = make([]byte, size)
	}
	m = m[:size]
	clear(m[:flowModFixed])
	m[0], m[1] = ofVersion15, typeFlowMod
	be.PutUint16(m[offLength:], uint16(size))
	copy(m[offCookie:offCookie+8], raw[16:24])   // cookie; cookie_mask stays 0
	m[offTable] = raw[4]                         // table_id; command stays ADD (0)
	copy(m[offIdle:offIdle+2], raw[8:10])        // idle_timeout
	copy(m[offHard:offHard+2], raw[10:12])       // hard_timeout
	copy(m[offPriority:offPriority+2], raw[6:8]) // priority
	be.PutUint32(m[offBufferID:], noBuffer)
	be.PutUint32(m[offOutPort:], portAny)
	be.PutUint32(m[offOutGroup:], groupAny)
	copy(m[offFlags:flowModFixed], raw[12:16]) // flags, importance
	copy(m[flowModFixed:], match)
	copy(m[flowModFixed+len(match):], instrs)
	return m, nil
}

// MeterFromDesc returns the METER_MOD ADD (xid 0) that installs one
// ofp_meter_desc of a dump.
func MeterFromDesc(raw []byte) ([]byte, error) {
	if len(raw) < meterDescFixed {
		return nil, fmt.Errorf("meter entry of %d bytes is truncated", len(raw))
	}
	size := headerLen + len(raw)
	if size > MaxMessage {
		return nil, fmt.Errorf("meter of %d bytes exceeds the %d-byte limit", size, MaxMessage)
	}
	m := make([]byte, size)
	m[0], m[1] = ofVersion15, typeMeterMod
	be.PutUint16(m[offLength:], uint16(size))
	copy(m[offModCommand+2:], raw[2:]) // flags, meter_id, bands; command stays ADD (0)
	return m, nil
}
