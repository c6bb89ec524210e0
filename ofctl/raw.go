package ofctl

import (
	"encoding/binary"
	"errors"

	"antrea.io/libOpenflow/openflow15"
)

// rawBytes is a match field value or mask kept exactly as encoded.
type rawBytes []byte

func (r *rawBytes) Len() uint16                    { return uint16(len(*r)) }
func (r *rawBytes) MarshalBinary() ([]byte, error) { return append([]byte(nil), *r...), nil }
func (r *rawBytes) UnmarshalBinary(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// rawAction is an encoded OpenFlow 1.5 action, kept exactly as OVS encodes
// it so that FlowMod.MarshalBinary reproduces OVS's bytes.
type rawAction struct {
	openflow15.ActionHeader
	data []byte
}

func newRawAction(b []byte) *rawAction {
	a := &rawAction{data: b}
	a.Type = binary.BigEndian.Uint16(b)
	a.Length = binary.BigEndian.Uint16(b[2:])
	return a
}

func (a *rawAction) Len() uint16                    { return uint16(len(a.data)) }
func (a *rawAction) MarshalBinary() ([]byte, error) { return append([]byte(nil), a.data...), nil }
func (a *rawAction) UnmarshalBinary(b []byte) error {
	if len(b) < 4 {
		return errors.New("ofctl: action too short")
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	if n < 4 || n > len(b) {
		return errors.New("ofctl: bad action length")
	}
	*a = *newRawAction(append([]byte(nil), b[:n]...))
	return nil
}

// pad8 pads b with zeros to a multiple of 8 bytes.
func pad8(b []byte) []byte {
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// setLen16 writes the length of b into bytes 2-3 (action and instruction
// headers).
func setLen16(b []byte) []byte {
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// nxHeader starts a Nicira extension action of the given subtype; the
// length is filled in by setLen16 once the body is complete.
func nxHeader(subtype uint16) []byte {
	b := make([]byte, 10)
	binary.BigEndian.PutUint16(b, 0xffff)
	binary.BigEndian.PutUint32(b[4:], nxVendor)
	binary.BigEndian.PutUint16(b[8:], subtype)
	return b
}

const nxVendor = 0x00002320

// Nicira action subtypes (OVS's NXAST_RAW_*).
const (
	nxastResubmit      = 1
	nxastResubmitTable = 14
	nxastOutputReg     = 15
	nxastOutputReg2    = 32
	nxastLearn         = 16
	nxastExit          = 17
	nxastController    = 20
	nxastConjunction   = 34
	nxastCT            = 35
	nxastNAT           = 36
	nxastController2   = 37
	nxastCTClear       = 43
	nxastResubmitCT    = 44
	nxastLearn2        = 45
)

// OpenFlow 1.5 action types.
const (
	ofpatOutput    = 0
	ofpatPushVLAN  = 17
	ofpatPopVLAN   = 18
	ofpatGroup     = 22
	ofpatSetNwTTL  = 23
	ofpatDecNwTTL  = 24
	ofpatSetField  = 25
	ofpatCopyField = 28
	ofpatMeter     = 29
	ofpatVendor    = 0xffff
)
