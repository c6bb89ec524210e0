package ofconn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"

	"antrea.io/libOpenflow/openflow15"
	"antrea.io/libOpenflow/util"

	"github.com/flowstate-io/flowstate/entry"
)

// Flow is one entry of a flow dump.
type Flow struct {
	// Desc is the decoded entry; nil when libOpenflow cannot decode it faithfully (then Err says why).
	Desc *openflow15.FlowDesc
	// Raw is the ofp_flow_desc entry as OVS sent it.
	Raw []byte
	// Err is why Desc is nil.
	Err error
}

// Table returns the flow's table id, read from Raw.
func (f Flow) Table() uint8 { return f.Raw[4] }

// Priority returns the flow's priority, read from Raw.
func (f Flow) Priority() uint16 { return be.Uint16(f.Raw[6:8]) }

// Cookie returns the flow's cookie, read from Raw.
func (f Flow) Cookie() uint64 { return be.Uint64(f.Raw[16:24]) }

// MatchBytes returns the flow's ofp_match with its padding, read from Raw: enough to delete (strictly) a flow
// that cannot be decoded. It returns nil if the match length in Raw is inconsistent.
func (f Flow) MatchBytes() []byte {
	n := int(be.Uint16(f.Raw[flowDescFixed+2:]))
	if n < 4 || flowDescFixed+(n+7)/8*8 > len(f.Raw) {
		return nil
	}
	return f.Raw[flowDescFixed : flowDescFixed+(n+7)/8*8]
}

// FlowMod returns the FLOW_MOD (command ADD, xid 0) that installs the flow, built from Raw without libOpenflow
// (entry.FlowFromDesc), so it works for flows libOpenflow cannot decode. For a decoded flow it equals the encoding
// of FlowModFromDesc(f.Desc).
func (f Flow) FlowMod() (Message, error) {
	m, err := entry.FlowFromDesc(f.Raw)
	if err != nil {
		return nil, fmt.Errorf("ofconn: %w", err)
	}
	return m, nil
}

// Group is one entry of a group dump.
type Group struct {
	// Desc is the decoded entry; nil when libOpenflow cannot decode it faithfully (then Err says why).
	Desc *openflow15.GroupDesc
	// Raw is the ofp_group_desc entry as OVS sent it.
	Raw []byte
	// Err is why Desc is nil.
	Err error
}

// ID returns the group id, read from Raw.
func (g Group) ID() uint32 { return be.Uint32(g.Raw[4:8]) }

// GroupMod returns the canonical payload of the group (entry.GroupFromDesc), built from Raw without
// libOpenflow: one GROUP_MOD (command ADD, xid 0), which for a decoded group equals the encoding of
// GroupModFromDesc(g.Desc), or for a group larger than one message the ADD followed by its INSERT_BUCKET
// messages (entry.GroupMessages splits them).
func (g Group) GroupMod() (Message, error) {
	m, err := groupMod(g.Raw)
	if err != nil {
		return nil, fmt.Errorf("ofconn: %w", err)
	}
	return m, nil
}

func groupMod(raw []byte) ([]byte, error) {
	g, err := entry.GroupFromDesc(raw)
	if err != nil {
		return nil, err
	}
	return g.Encode()
}

// Meter is one entry of a meter dump.
type Meter struct {
	// Desc is the decoded entry; nil when libOpenflow cannot decode it faithfully (then Err says why).
	Desc *openflow15.MeterDesc
	// Raw is the ofp_meter_desc entry as OVS sent it.
	Raw []byte
	// Err is why Desc is nil.
	Err error
}

// ID returns the meter id, read from Raw.
func (m Meter) ID() uint32 { return be.Uint32(m.Raw[4:8]) }

// MeterMod returns the METER_MOD (command ADD, xid 0) that installs the meter, built from Raw without
// libOpenflow (entry.MeterFromDesc). For a decoded meter it equals the encoding of MeterModFromDesc(m.Desc).
func (m Meter) MeterMod() (Message, error) {
	mm, err := entry.MeterFromDesc(m.Raw)
	if err != nil {
		return nil, fmt.Errorf("ofconn: %w", err)
	}
	return mm, nil
}

const (
	flowDescFixed = 24 // ofp_flow_desc up to its match
	flowModFixed  = 48 // ofp_flow_mod up to its match
	// The smallest entries: fixed part, and for flows an empty match (8 bytes with padding).
	minFlowDesc  = flowDescFixed + 8
	minGroupDesc = 16
	minMeterDesc = 8
)

// DumpFlowsRaw returns every flow of every table without decoding it with
// libOpenflow: Desc is nil, Raw is structure-checked (Err says what is wrong).
// Callers that work on bytes (Flow.FlowMod) save the decode, most of a dump's
// CPU.
func (c *Conn) DumpFlowsRaw(ctx context.Context) ([]Flow, error) {
	var flows []Flow
	err := c.EachFlow(ctx, func(f Flow) error {
		flows = append(flows, f) // Raw stays valid: every reply has its own buffer
		return nil
	})
	return flows, err
}

// rawFlows sends one OFPMP_FLOW_DESC request per body and returns the flows
// of the replies undecoded, structure-checked.
func (c *Conn) rawFlows(ctx context.Context, bodies []util.Message) ([]Flow, error) {
	var flows []Flow
	err := c.multiparts(ctx, openflow15.MultipartType_FlowDesc, bodies, false, minFlowDesc, func(raw []byte) error {
		f := Flow{Raw: raw}
		if err := checkFlowEntry(raw); err != nil {
			f.Err = fmt.Errorf("ofconn: malformed flow (table %d, priority %d): %w", raw[4], be.Uint16(raw[6:8]), err)
		}
		flows = append(flows, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ofconn: dump flows: %w", err)
	}
	return flows, nil
}

// DumpMeters returns the configuration of every meter.
func (c *Conn) DumpMeters(ctx context.Context) ([]Meter, error) {
	var meters []Meter
	err := c.multipart(ctx, openflow15.MultipartType_MeterDesc, openflow15.NewMeterMultipartRequest(openflow15.M_ALL), minMeterDesc, func(raw []byte) error {
		meters = append(meters, decodeMeter(raw))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ofconn: dump meters: %w", err)
	}
	return meters, nil
}

// decodeGroup decodes one ofp_group_desc entry of at least minGroupDesc bytes. It never panics.
func decodeGroup(raw []byte) Group {
	gd := openflow15.NewGroupDesc()
	err := checkGroupEntry(raw)
	if err == nil {
		err = decode(gd, raw)
	}
	if err == nil {
		err = checkBuckets(gd.Buckets)
	}
	if err == nil {
		err = reencodes(gd, raw)
	}
	if err != nil {
		return Group{Raw: raw, Err: fmt.Errorf("ofconn: undecodable group %d: %w", be.Uint32(raw[4:8]), err)}
	}
	return Group{Desc: gd, Raw: raw}
}

// decodeMeter decodes one ofp_meter_desc entry of at least minMeterDesc bytes. It never panics.
func decodeMeter(raw []byte) Meter {
	md := openflow15.NewMeterDesc(0)
	err := checkMeterEntry(raw)
	if err == nil {
		err = decode(md, raw)
	}
	if err == nil {
		err = reencodes(md, raw)
	}
	if err != nil {
		return Meter{Raw: raw, Err: fmt.Errorf("ofconn: undecodable meter %d: %w", be.Uint32(raw[4:8]), err)}
	}
	return Meter{Desc: md, Raw: raw}
}

// multipart sends one multipart request and calls each for every entry of every reply until REPLY_MORE clears.
// Entries start with their 16-bit length, as flow, group and meter descriptions do.
func (c *Conn) multipart(ctx context.Context, mpType uint16, body util.Message, minEntry int, each func(raw []byte) error) error {
	return c.multiparts(ctx, mpType, []util.Message{body}, false, minEntry, each)
}

// multiparts sends one multipart request per body, written at once with consecutive xids (and a barrier after
// them if barrier is set), and calls each for every entry of every reply until each request's REPLY_MORE
// cleared. An error reply to any request ends it with that error; a barrier reply while a request is still open,
// with a *ForeignError or errUnanswered.
func (c *Conn) multiparts(ctx context.Context, mpType uint16, bodies []util.Message, barrier bool, minEntry int, each func(raw []byte) error) error {
	if len(bodies) == 0 {
		return nil
	}
	n := uint32(len(bodies))
	xid := c.nextXids(n + 1)
	var msgs []byte
	for i, body := range bodies {
		req := openflow15.NewMpRequest(mpType)
		req.Body = append(req.Body, body)
		req.Header.Xid = xid + uint32(i)
		b, err := req.MarshalBinary()
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		msgs = append(msgs, b...)
	}
	if barrier {
		msgs = append(msgs, controlMsg(openflow15.Type_BarrierRequest, xid+n, nil)...)
	}
	w := c.registerLimit(xid, n+1, dumpQueue)
	defer c.unregister(w)
	foreign := c.foreign.Load()
	if err := c.write(ctx, true, func(bw *bufio.Writer) error {
		_, err := bw.Write(msgs)
		return err
	}); err != nil {
		return err
	}
	c.stats.countSent(openflow15.Type_MultiPartRequest, len(msgs))
	for open := len(bodies); open > 0; {
		f, err := c.recv(ctx, w)
		if err != nil {
			return err
		}
		switch f[1] {
		case openflow15.Type_Error:
			return decodeError(f)
		case openflow15.Type_MultiPartReply:
		case openflow15.Type_BarrierReply:
			// Every reply precedes the barrier's: a request left
			// open was not taken (foreign.go).
			if barrier && frameXid(f) == xid+n {
				if err := c.foreignSince(foreign); err != nil {
					return err
				}
				return errUnanswered
			}
			continue
		default:
			continue
		}
		more, err := splitEntries(f, mpType, minEntry, each)
		if err != nil {
			return err
		}
		if !more {
			open--
		}
	}
	return nil
}

// splitEntries calls each for every entry of one multipart reply and reports whether more replies follow.
func splitEntries(f []byte, mpType uint16, minEntry int, each func(raw []byte) error) (more bool, err error) {
	if len(f) < headerLen+8 {
		return false, fmt.Errorf("multipart reply of %d bytes", len(f))
	}
	if t := be.Uint16(f[8:10]); t != mpType {
		return false, fmt.Errorf("multipart reply of type %d to a request of type %d", t, mpType)
	}
	more = be.Uint16(f[10:12])&openflow15.OFPMPF_REPLY_MORE != 0
	for b := f[headerLen+8:]; len(b) > 0; {
		if len(b) < minEntry {
			return false, fmt.Errorf("truncated multipart entry: %d bytes left", len(b))
		}
		n := int(be.Uint16(b[0:2]))
		if len(b) > 0xffff && n == len(b)&0xffff {
			n = len(b) // a group description whose length wrapped (wrapped.go)
		}
		if n < minEntry || n > len(b) {
			return false, fmt.Errorf("multipart entry of length %d with %d bytes left", n, len(b))
		}
		// The full slice expression keeps appends to an entry from spilling into the next.
		if err := each(b[:n:n]); err != nil {
			return false, err
		}
		b = b[n:]
	}
	return more, nil
}

// decode runs a libOpenflow decoder, which panics on some inputs (a nil action for Nicira actions it does not
// know, short data).
func decode(m util.Message, raw []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("libOpenflow failed to decode it: %v", r)
		}
	}()
	return m.UnmarshalBinary(raw)
}

// reencodes checks that m encodes back to raw: a decoder that silently drops or alters something would make the
// entry look different from what was asked for forever.
func reencodes(m util.Message, raw []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("libOpenflow failed to re-encode it: %v", r)
		}
	}()
	b, err := m.MarshalBinary()
	if err != nil {
		return fmt.Errorf("libOpenflow failed to re-encode it: %w", err)
	}
	if !bytes.Equal(b, raw) {
		return errors.New("libOpenflow decodes it lossily (it re-encodes differently)")
	}
	return nil
}

func checkBuckets(buckets []openflow15.Bucket) error {
	for i, b := range buckets {
		if err := checkActions(b.Actions); err != nil {
			return fmt.Errorf("bucket %d: %w", i, err)
		}
	}
	return nil
}

func checkActions(actions []openflow15.Action) error {
	for i, a := range actions {
		if a == nil {
			return fmt.Errorf("action %d not understood by libOpenflow", i)
		}
	}
	return nil
}

// FlowModFromDesc returns the FLOW_MOD (command ADD, xid 0) that installs the dumped flow fd: same cookie,
// table, priority, timeouts, flags, importance, match and instructions. Out port and out group are ANY and the
// buffer id NO_BUFFER, as ovs-ofctl sends them. The result shares fd's match fields and instructions. Its
// encoding equals OVS's own encoding of the flow, so desired and actual flows compare by bytes.
func FlowModFromDesc(fd *openflow15.FlowDesc) *openflow15.FlowMod {
	fm := openflow15.NewFlowMod()
	fm.Header.Xid = 0
	fm.Cookie = fd.Cookie
	fm.CookieMask = 0
	fm.TableId = fd.TableId
	fm.Command = openflow15.FC_ADD
	fm.IdleTimeout = fd.IdleTimeout
	fm.HardTimeout = fd.HardTimeout
	fm.Priority = fd.Priority
	fm.BufferId = 0xffffffff
	fm.OutPort = openflow15.P_ANY
	fm.OutGroup = openflow15.OFPG_ANY
	fm.Flags = fd.Flags
	fm.Importance = fd.Importance
	fm.Match = fd.Match
	fm.Instructions = append([]openflow15.Instruction(nil), fd.Instructions...)
	return fm
}

// GroupModFromDesc returns the GROUP_MOD (command ADD, xid 0) that installs the dumped group gd. The result
// shares gd's buckets and properties.
func GroupModFromDesc(gd *openflow15.GroupDesc) *openflow15.GroupMod {
	gm := openflow15.NewGroupMod()
	gm.Header.Xid = 0
	gm.Command = openflow15.OFPGC_ADD
	gm.Type = gd.Type
	gm.GroupId = gd.GroupId
	gm.Buckets = append([]openflow15.Bucket(nil), gd.Buckets...)
	gm.BucketArrayLen = gd.BucketArrayLen
	gm.Properties = append([]util.Message(nil), gd.Properties...)
	return gm
}

// MeterModFromDesc returns the METER_MOD (command ADD, xid 0) that installs the dumped meter md. The result
// shares md's bands.
func MeterModFromDesc(md *openflow15.MeterDesc) *openflow15.MeterMod {
	mm := openflow15.NewMeterMod()
	mm.Header.Xid = 0
	mm.Command = openflow15.MC_ADD
	mm.Flags = md.Flags
	mm.MeterId = md.MeterId
	mm.MeterBands = append([]util.Message(nil), md.Bands...)
	return mm
}
