package canon

import (
	"github.com/flowstate-io/flowstate/entry"
)

// FromSwitch returns a flow the switch dumped (a canonical FLOW_MOD ADD) in
// flowstate's canonical form. The two differ in one place: OVS stores a
// tun_metadata field, in the match and in actions, at the option length the
// bridge's TLV map gives it, where ovs-ofctl, and so Parse, encode it as wide
// as its value. Such a flow is re-encoded (Decode, about 9 µs); every other
// dumped flow is returned as it is. If it cannot be re-encoded it is
// returned as it is too: it then differs from the desired flow, which a
// replay corrects, as for any flow the switch holds otherwise.
func FromSwitch(m []byte) []byte {
	if !usesTunMetadata(m) {
		return m
	}
	p, _, err := Decode(entry.KindFlow, m)
	if err != nil {
		return m
	}
	return p
}

// tun_metadata0..63 are NXM class 1 fields 40 to 103.
func isTunMetadata(h []byte) bool {
	return h[0] == 0 && h[1] == 1 && h[2]>>1 >= 40 && h[2]>>1 <= 103
}

// usesTunMetadata looks for a tun_metadata field header in a FLOW_MOD: in
// its match, field by field; in its instructions at every 4-byte boundary,
// where the field headers of actions sit (set_field, move, load, ...). A
// false hit only costs a re-encoding that changes nothing.
func usesTunMetadata(m []byte) bool {
	if len(m) < entry.FlowModFixed+4 {
		return false
	}
	fields, ok := entry.FlowModMatchFields(m)
	_, mlen := entry.FlowModMatchHeader(m)
	end := entry.FlowModFixed + (mlen+7)&^7
	if !ok || end > len(m) {
		return false
	}
	for b := fields; len(b) >= 4; b = b[4+int(b[3]):] {
		if isTunMetadata(b) {
			return true
		}
		if 4+int(b[3]) > len(b) {
			break
		}
	}
	for off := end; off+4 <= len(m); off += 4 {
		if isTunMetadata(m[off:]) {
			return true
		}
	}
	return false
}
