package ofconn

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
)

// TLVMap is one entry of a bridge's TLV table: Geneve option (Class, Type)
// of Len bytes, matched as tun_metadata<Index>.
type TLVMap struct {
	Class uint16
	Type  uint8
	Len   uint8
	Index uint16
}

// NXT_TLV_TABLE_MOD commands.
const (
	TLVAdd    = 0
	TLVDelete = 1
	TLVClear  = 2
)

// Layout of the Nicira TLV table messages (OVS's nx_tlv_table_mod,
// nx_tlv_table_reply and nx_tlv_map).
const (
	nxtHeaderLen  = 16 // OpenFlow header, experimenter id, subtype
	tlvModFixed   = nxtHeaderLen + 8
	tlvReplyFixed = nxtHeaderLen + 16
	tlvMapLen     = 8
)

// TLVTableMod is an NXT_TLV_TABLE_MOD of command with maps.
func TLVTableMod(command uint16, maps []TLVMap) Message {
	b := make([]byte, tlvModFixed, tlvModFixed+tlvMapLen*len(maps))
	putNXTHeader(b, openflow15.Type_TlvTableMod, 0)
	binary.BigEndian.PutUint16(b[nxtHeaderLen:], command)
	for _, m := range maps {
		b = binary.BigEndian.AppendUint16(b, m.Class)
		b = append(b, m.Type, m.Len)
		b = binary.BigEndian.AppendUint16(b, m.Index)
		b = append(b, 0, 0)
	}
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	return b
}

// ParseTLVTableMod returns the command and maps of an NXT_TLV_TABLE_MOD,
// or an error naming what is wrong with it.
func ParseTLVTableMod(m []byte) (command uint16, maps []TLVMap, err error) {
	if !isNXT(m, openflow15.Type_TlvTableMod) || len(m) < tlvModFixed {
		return 0, nil, fmt.Errorf("ofconn: not an NXT_TLV_TABLE_MOD (%d bytes): %w", len(m), ErrMalformed)
	}
	if int(binary.BigEndian.Uint16(m[2:4])) != len(m) || (len(m)-tlvModFixed)%tlvMapLen != 0 {
		return 0, nil, fmt.Errorf("ofconn: NXT_TLV_TABLE_MOD of %d bytes: its maps are not whole: %w", len(m), ErrMalformed)
	}
	maps, err = parseTLVMaps(m[tlvModFixed:])
	return binary.BigEndian.Uint16(m[nxtHeaderLen:]), maps, err
}

// TLVTable returns the bridge's TLV table (NXT_TLV_TABLE_REQUEST).
func (c *Conn) TLVTable(ctx context.Context) ([]TLVMap, error) {
	xid := c.nextXids(1)
	w := c.register(xid, 1)
	defer c.unregister(w)
	req := make([]byte, nxtHeaderLen)
	putNXTHeader(req, openflow15.Type_TlvTableRequest, xid)
	if err := c.write(ctx, true, func(bw *bufio.Writer) error {
		_, err := bw.Write(req)
		return err
	}); err != nil {
		return nil, fmt.Errorf("ofconn: tlv table request: %w", err)
	}
	c.stats.countSent(openflow15.Type_Experimenter, len(req))
	for {
		f, err := c.recv(ctx, w)
		if err != nil {
			return nil, fmt.Errorf("ofconn: tlv table request: %w", err)
		}
		switch {
		case f[1] == openflow15.Type_Error:
			return nil, decodeError(f)
		case isNXT(f, openflow15.Type_TlvTableReply):
			if len(f) < tlvReplyFixed || (len(f)-tlvReplyFixed)%tlvMapLen != 0 {
				return nil, fmt.Errorf("ofconn: NXT_TLV_TABLE_REPLY of %d bytes: %w", len(f), ErrMalformed)
			}
			return parseTLVMaps(f[tlvReplyFixed:])
		}
	}
}

func parseTLVMaps(b []byte) ([]TLVMap, error) {
	var out []TLVMap
	for ; len(b) >= tlvMapLen; b = b[tlvMapLen:] {
		out = append(out, TLVMap{Class: binary.BigEndian.Uint16(b), Type: b[2], Len: b[3], Index: binary.BigEndian.Uint16(b[4:])})
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("ofconn: a TLV map of %d bytes: %w", len(b), ErrMalformed)
	}
	return out, nil
}

// IsTLVTableMod reports whether m is an NXT_TLV_TABLE_MOD.
func IsTLVTableMod(m []byte) bool { return isNXT(m, openflow15.Type_TlvTableMod) }

func putNXTHeader(b []byte, subtype uint32, xid uint32) {
	b[0], b[1] = openflow15.VERSION, openflow15.Type_Experimenter
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	binary.BigEndian.PutUint32(b[4:8], xid)
	binary.BigEndian.PutUint32(b[8:12], openflow15.NxExperimenterID)
	binary.BigEndian.PutUint32(b[12:16], subtype)
}

func isNXT(m []byte, subtype uint32) bool {
	return len(m) >= nxtHeaderLen && m[1] == openflow15.Type_Experimenter &&
		binary.BigEndian.Uint32(m[8:12]) == openflow15.NxExperimenterID && binary.BigEndian.Uint32(m[12:16]) == subtype
}
