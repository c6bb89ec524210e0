package ofconn

import (
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
)

// libOpenflow's decoders walk lists by the length of each element they decoded; an element of length 0 makes
// them loop forever. OVS never sends one, but a dump must not be able to hang the daemon, so the structure of
// every entry is checked before libOpenflow sees it.

const nxVendor = 0x00002320

// Nicira actions that hold a list of actions, and where that list starts.
var nestedActionsAt = map[uint16]int{
	35: 24, // NXAST_CT
	42: 16, // NXAST_CLONE
}

func pad8(n int) int { return (n + 7) / 8 * 8 }

// checkTLVs checks that b is a list of elements whose 16-bit length is at offset 2, each at least min bytes and
// a multiple of align, covering b exactly; each is passed to inner if not nil.
func checkTLVs(b []byte, what string, min, align int, inner func([]byte) error) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return fmt.Errorf("truncated %s", what)
		}
		n := int(be.Uint16(b[2:4]))
		if n < min || n%align != 0 || n > len(b) {
			return fmt.Errorf("%s of bad length %d (%d bytes left)", what, n, len(b))
		}
		if inner != nil {
			if err := inner(b[:n]); err != nil {
				return err
			}
		}
		b = b[n:]
	}
	return nil
}

func checkActionList(b []byte) error {
	return checkTLVs(b, "action", 8, 8, func(a []byte) error {
		if be.Uint16(a[0:2]) != 0xffff || len(a) < 10 || be.Uint32(a[4:8]) != nxVendor {
			return nil
		}
		if at, ok := nestedActionsAt[be.Uint16(a[8:10])]; ok {
			if len(a) < at {
				return fmt.Errorf("nested action list of bad length %d", len(a))
			}
			return checkActionList(a[at:])
		}
		return nil
	})
}

// checkOXMs checks a list of OXM (or OXS) fields: 4-byte headers with the payload length in their last byte.
func checkOXMs(b []byte, what string) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return fmt.Errorf("truncated %s", what)
		}
		n := 4 + int(b[3])
		if n > len(b) {
			return fmt.Errorf("%s of length %d with %d bytes left", what, n, len(b))
		}
		b = b[n:]
	}
	return nil
}

// checkFlowEntry checks the structure of an ofp_flow_desc entry.
func checkFlowEntry(raw []byte) error {
	if n := int(be.Uint16(raw[0:2])); n != len(raw) {
		return fmt.Errorf("entry length %d in %d bytes", n, len(raw))
	}
	b := raw[flowDescFixed:]
	mlen := int(be.Uint16(b[2:4]))
	if mlen < 4 || pad8(mlen) > len(b) {
		return fmt.Errorf("match of bad length %d", mlen)
	}
	if err := checkOXMs(b[4:mlen], "match field"); err != nil {
		return err
	}
	b = b[pad8(mlen):]
	if len(b) < 4 {
		return fmt.Errorf("no stats")
	}
	slen := int(be.Uint16(b[2:4]))
	if slen < 4 || pad8(slen) > len(b) {
		return fmt.Errorf("stats of bad length %d", slen)
	}
	if err := checkOXMs(b[4:slen], "stats field"); err != nil {
		return err
	}
	return checkTLVs(b[pad8(slen):], "instruction", 8, 8, func(in []byte) error {
		switch be.Uint16(in[0:2]) {
		case 3, 4, 5: // write, apply, clear actions
			return checkActionList(in[8:])
		}
		return nil
	})
}

// checkGroupEntry checks the structure of an ofp_group_desc entry.
func checkGroupEntry(raw []byte) error {
	if n := int(be.Uint16(raw[0:2])); n != len(raw) {
		return fmt.Errorf("entry length %d in %d bytes", n, len(raw))
	}
	buckets := int(be.Uint16(raw[8:10]))
	if minGroupDesc+buckets > len(raw) {
		return fmt.Errorf("buckets of bad length %d", buckets)
	}
	if err := checkBucketList(raw[minGroupDesc : minGroupDesc+buckets]); err != nil {
		return err
	}
	return checkTLVs(raw[minGroupDesc+buckets:], "group property", 4, 1, nil)
}

func checkBucketList(b []byte) error {
	for len(b) > 0 {
		bk, rest, err := entry.NextBucket(b)
		if err != nil {
			return fmt.Errorf("bucket: %w", err)
		}
		if n := len(bk.Raw); n%8 != 0 {
			return fmt.Errorf("bucket of bad length %d (actions %d, %d bytes left)", n, len(bk.Actions), len(b))
		}
		if err := checkActionList(bk.Actions); err != nil {
			return err
		}
		if err := checkTLVs(bk.Props, "bucket property", 4, 1, nil); err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// checkMeterEntry checks the structure of an ofp_meter_desc entry.
func checkMeterEntry(raw []byte) error {
	if n := int(be.Uint16(raw[0:2])); n != len(raw) {
		return fmt.Errorf("entry length %d in %d bytes", n, len(raw))
	}
	return checkTLVs(raw[minMeterDesc:], "meter band", 16, 8, nil)
}
