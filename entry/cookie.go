package entry

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// CookieSpace is the part of the cookie space whose flows flowstated manages
// on a bridge: the cookies c with c&Mask == Value&Mask. The zero value, 0/0,
// is every flow. Flows outside the space belong to another controller:
// replays, audits and diffs leave them alone.
type CookieSpace struct {
	Value, Mask uint64
}

// Owns reports whether a flow with cookie lies in the space.
func (s CookieSpace) Owns(cookie uint64) bool { return cookie&s.Mask == s.Value&s.Mask }

// All reports whether the space is every cookie.
func (s CookieSpace) All() bool { return s.Mask == 0 }

func (s CookieSpace) String() string { return fmt.Sprintf("0x%x/0x%x", s.Value&s.Mask, s.Mask) }

// ParseCookieSpace parses VALUE/MASK (decimal or 0x hex, as ovs-ofctl's
// cookie=VALUE/MASK), or a bare VALUE for an exact cookie.
func ParseCookieSpace(s string) (CookieSpace, error) {
	v, m, masked := strings.Cut(s, "/")
	value, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return CookieSpace{}, fmt.Errorf("cookie space %q: value: %w", s, err)
	}
	mask := ^uint64(0)
	if masked {
		if mask, err = strconv.ParseUint(m, 0, 64); err != nil {
			return CookieSpace{}, fmt.Errorf("cookie space %q: mask: %w", s, err)
		}
	}
	if value&^mask != 0 {
		return CookieSpace{}, fmt.Errorf("cookie space %q: the value has bits outside the mask (0x%x)", s, value&^mask)
	}
	return CookieSpace{Value: value, Mask: mask}, nil
}

// FlowCookie reads the cookie of a canonical FLOW_MOD.
func FlowCookie(payload []byte) uint64 {
	if len(payload) < offCookie+8 {
		return 0
	}
	return binary.BigEndian.Uint64(payload[offCookie:])
}
