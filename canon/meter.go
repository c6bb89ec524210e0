package canon

import (
	"fmt"

	"github.com/flowstate-io/flowstate/ofctl"
)

const (
	meterModFixed = 16
	meterBandLen  = 16
)

// canonicalMeter returns the canonical METER_MOD of an encoded one that
// passed entry.Identify: printed and parsed back when ofctl knows its bands,
// otherwise checked for structure and kept as sent (OVS knows drop,
// dscp_remark and experimenter bands).
func canonicalMeter(b []byte, kept *bool) ([]byte, error) {
	for bands := b[meterModFixed:]; len(bands) > 0; {
		if len(bands) < 4 {
			return nil, fmt.Errorf("truncated meter band (%d bytes)", len(bands))
		}
		n := int(be.Uint16(bands[2:]))
		if n < meterBandLen || n%8 != 0 || n > len(bands) {
			return nil, fmt.Errorf("meter band of length %d (want a multiple of 8, at least 16, at most the %d bytes left)", n, len(bands))
		}
		bands = bands[n:]
	}
	if text, err := ofctl.FormatMeterMod(b); err == nil {
		if mm, err := ofctl.ParseMeter(text); err == nil {
			if raw, err := mm.MarshalBinary(); err == nil {
				return raw, nil
			}
		}
	}
	*kept = true
	out := clone(b)
	be.PutUint32(out[4:], 0)
	return out, nil
}
