package ofctl

import (
	"fmt"
	"strings"

	"antrea.io/libOpenflow/openflow15"
)

// ParseMeterID finds the meter id of a del-meters line such as "meter=5",
// "meter=controller" or "meter=slowpath" (other keys are ignored, so a whole
// add-meter line works too). It accepts the ids vswitchd accepts: 1 to
// 0xffff0000 and the reserved slowpath (0xfffffffd) and controller
// (0xfffffffe) meters, and refuses "all". Errors are *SyntaxError.
func ParseMeterID(s string) (uint32, error) {
	toks := meterTokens(s, 0)
	for i := 0; i+1 < len(toks); i++ {
		if toks[i].s != "meter" {
			continue
		}
		v := toks[i+1]
		if id, ok := meterNames[v.s]; ok {
			return id, nil
		}
		id, err := parseUint(v.s, 32)
		if err != nil || id == 0 || id > openflow15.M_MAX {
			return 0, errAt(v.off, v.s, "invalid meter id (want 1 to %d, controller or slowpath)", uint32(openflow15.M_MAX))
		}
		return uint32(id), nil
	}
	return 0, errAt(len(s), "", "must specify 'meter'")
}

// CheckMeterID says whether vswitchd accepts id as a meter's id.
func CheckMeterID(id uint32) error {
	if id == 0 || id > openflow15.M_MAX && id != openflow15.M_SLOWPATH && id != openflow15.M_CONTROLLER {
		return fmt.Errorf("ofctl: invalid meter id %#x (want 1 to %d, controller or slowpath)", id, uint32(openflow15.M_MAX))
	}
	return nil
}

// ParseGroupID finds the group id of a del-groups line such as
// "group_id=5" (other keys are ignored). Errors are *SyntaxError.
func ParseGroupID(s string) (uint32, error) {
	sc := newScanner(s, 0)
	for {
		p, ok, err := sc.next()
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		if p.key != "group_id" || strings.HasPrefix(p.val, "bucket") {
			continue
		}
		v, err := parseUint(p.val, 32)
		if err != nil || v > groupMax {
			return 0, errAt(p.valOff, p.val, "invalid group id (want 0 to %d)", groupMax)
		}
		return uint32(v), nil
	}
	return 0, errAt(len(s), "", "must specify a group_id")
}
