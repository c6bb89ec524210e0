package ofctl

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Packet-in reasons (OFPR_*) with the names ovs-ofctl uses.
var pinReasons = []string{"no_match", "action", "invalid_ttl", "action_set", "group", "packet_out"}

const reasonAction = 1

// NXAST_CONTROLLER2 property types.
const (
	ctlPropMaxLen = iota
	ctlPropControllerID
	ctlPropReason
	ctlPropUserdata
	ctlPropPause
	ctlPropMeterID
)

// noMeter is OVS's NX_CTLR_NO_METER: meter_id=0 means no meter.
const noMeter = 0

// controllerAction is OVS's struct ofpact_controller.
type controllerAction struct {
	maxLen   uint16
	id       uint16
	reason   uint8
	userdata []byte
	pause    bool
	meterID  uint32
}

// parseControllerArgs parses controller(key=value,...) and encodes it as
// OVS does: plain output when only max_len is given, NXAST_CONTROLLER for
// reason and id, NXAST_CONTROLLER2 when userdata, pause or meter_id appear.
func parseControllerArgs(p kv) ([]byte, error) {
	c := controllerAction{maxLen: 0xffff, reason: reasonAction, meterID: noMeter}
	hasUserdata := false
	for q, err := range args(p.val, p.valOff) {
		if err != nil {
			return nil, err
		}
		switch q.key {
		case "reason":
			i := indexOf(pinReasons, q.val)
			if i < 0 {
				return nil, errAt(q.valOff, q.val, "unknown reason (want one of %s)", strings.Join(pinReasons, ", "))
			}
			c.reason = uint8(i)
		case "max_len", "id":
			v, err := parseUint(q.val, 16)
			if err != nil {
				return nil, errAt(q.valOff, q.val, "bad %s (want 0 to 65535)", q.key)
			}
			if q.key == "id" {
				c.id = uint16(v)
			} else {
				c.maxLen = uint16(v)
			}
		case "userdata":
			b, err := parseHexArg(q.val)
			if err != nil {
				return nil, errAt(q.valOff, q.val, "bad hex digit in `controller' action `userdata'")
			}
			c.userdata, hasUserdata = b, true
		case "pause":
			c.pause = true
		case "meter_id":
			v, err := parseUint(q.val, 32)
			if err != nil {
				return nil, errAt(q.valOff, q.val, "bad meter_id")
			}
			c.meterID = uint32(v)
		default:
			return nil, errAt(q.keyOff, q.text(), "unknown key parsing controller action")
		}
	}
	if c.reason == reasonAction && c.id == 0 && !hasUserdata && !c.pause && c.meterID == noMeter {
		cx := &actx{}
		return cx.outputPort(kv{delim: ':'}, portController, c.maxLen)
	}
	if len(c.userdata) > 0 || c.pause || c.meterID != noMeter {
		return c.encode2(), nil
	}
	b := nxHeader(nxastController)
	b = binary.BigEndian.AppendUint16(b, c.maxLen)
	b = binary.BigEndian.AppendUint16(b, c.id)
	b = append(b, c.reason, 0)
	return setLen16(b), nil
}

func (c *controllerAction) encode2() []byte {
	b := setLen16(append(nxHeader(nxastController2), 0, 0, 0, 0, 0, 0))
	prop := func(typ uint16, body []byte) {
		start := len(b)
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint16(b, uint16(4+len(body)))
		b = append(b, body...)
		for (len(b)-start)%8 != 0 {
			b = append(b, 0)
		}
	}
	if c.maxLen != 0xffff {
		prop(ctlPropMaxLen, []byte{byte(c.maxLen >> 8), byte(c.maxLen), 0, 0})
	}
	if c.id != 0 {
		prop(ctlPropControllerID, []byte{byte(c.id >> 8), byte(c.id), 0, 0})
	}
	if c.reason != reasonAction {
		prop(ctlPropReason, []byte{c.reason})
	}
	if len(c.userdata) > 0 {
		prop(ctlPropUserdata, c.userdata)
	}
	if c.pause {
		prop(ctlPropPause, nil)
	}
	if c.meterID != noMeter {
		prop(ctlPropMeterID, binary.BigEndian.AppendUint32(nil, c.meterID))
	}
	return setLen16(pad8(b))
}

// parseHexArg parses hex bytes optionally separated by dots, as OVS's
// ofpbuf_put_hex does for userdata.
func parseHexArg(s string) ([]byte, error) {
	h := strings.ReplaceAll(s, ".", "")
	if h == "" || len(h)%2 != 0 {
		return nil, errors.New("bad hex")
	}
	return hex.DecodeString(h)
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func (c *controllerAction) String() string {
	if c.reason == reasonAction && c.id == 0 && len(c.userdata) == 0 && !c.pause && c.meterID == noMeter {
		return "CONTROLLER:" + strconv.Itoa(int(c.maxLen))
	}
	var parts []string
	if c.reason != reasonAction {
		r := strconv.Itoa(int(c.reason))
		if int(c.reason) < len(pinReasons) {
			r = pinReasons[c.reason]
		}
		parts = append(parts, "reason="+r)
	}
	if c.maxLen != 0xffff {
		parts = append(parts, "max_len="+strconv.Itoa(int(c.maxLen)))
	}
	if c.id != 0 {
		parts = append(parts, "id="+strconv.Itoa(int(c.id)))
	}
	if len(c.userdata) > 0 {
		hx := make([]string, len(c.userdata))
		for i, x := range c.userdata {
			hx[i] = fmt.Sprintf("%02x", x)
		}
		parts = append(parts, "userdata="+strings.Join(hx, "."))
	}
	if c.pause {
		parts = append(parts, "pause")
	}
	if c.meterID != noMeter {
		parts = append(parts, "meter_id="+strconv.FormatUint(uint64(c.meterID), 10))
	}
	return "controller(" + strings.Join(parts, ",") + ")"
}

func formatController1(a []byte) (string, error) {
	if len(a) != 16 {
		return "", errors.New("bad controller action length")
	}
	c := controllerAction{
		maxLen: binary.BigEndian.Uint16(a[10:]), id: binary.BigEndian.Uint16(a[12:]),
		reason: a[14], meterID: noMeter,
	}
	return c.String(), nil
}

func formatController2(a []byte) (string, error) {
	c := controllerAction{maxLen: 0xffff, reason: reasonAction, meterID: noMeter}
	b := a[16:]
	for len(b) > 0 {
		if len(b) < 4 {
			return "", errors.New("truncated controller property")
		}
		typ, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		padded := (n + 7) / 8 * 8
		if n < 4 || padded > len(b) {
			return "", errors.New("bad controller property length")
		}
		body := b[4:n]
		b = b[padded:]
		need := func(k int) error {
			if len(body) < k {
				return errors.New("short controller property")
			}
			return nil
		}
		switch typ {
		case ctlPropMaxLen:
			if err := need(2); err != nil {
				return "", err
			}
			c.maxLen = binary.BigEndian.Uint16(body)
		case ctlPropControllerID:
			if err := need(2); err != nil {
				return "", err
			}
			c.id = binary.BigEndian.Uint16(body)
		case ctlPropReason:
			if err := need(1); err != nil {
				return "", err
			}
			c.reason = body[0]
		case ctlPropUserdata:
			c.userdata = append([]byte(nil), body...)
		case ctlPropPause:
			c.pause = true
		case ctlPropMeterID:
			if err := need(4); err != nil {
				return "", err
			}
			c.meterID = binary.BigEndian.Uint32(body)
		default:
			return "", fmt.Errorf("unknown controller property %d", typ)
		}
	}
	return c.String(), nil
}
