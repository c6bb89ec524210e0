package canon

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
)

// Sizes.
const (
	// MaxMessage is the largest message an entry is sent in (the inner
	// message of a BUNDLE_ADD).
	MaxMessage = entry.MaxMessage
	// MaxPayload is the largest canonical entry (a group of many buckets).
	MaxPayload = entry.MaxPayload
	// MaxText is the largest entry in ovs-ofctl text.
	MaxText = MaxPayload
	// MaxBuckets is the most buckets a group may have: beyond it the
	// group's stats entry (40 bytes and 16 per bucket), which
	// ofconn.DumpGroups reads for all groups at once, passes 64 KiB, and
	// OVS 3.1 then wraps its length, or aborts if another group follows it
	// in the reply.
	MaxBuckets = (0xffff - 16 - 40) / 16
)

// OpenFlow 1.5 header constants.
const (
	ofVersion15  = 0x06
	typeGroupMod = 15
	headerLen    = 8
)

// Decode brings encoded OpenFlow 1.5 messages from a controller to the
// canonical form and returns the payload and its identity: a FLOW_MOD or
// METER_MOD ADD, or a GROUP_MOD ADD optionally followed by INSERT_BUCKET
// messages of the same group (command_bucket_id FIRST or LAST), back to back.
func Decode(kind entry.Kind, msg []byte) (payload, id []byte, err error) {
	payload, id, _, err = decode(kind, msg)
	return payload, id, err
}

// DecodeEntry is Decode into an entry, with Opaque set when part of it is
// kept as sent.
func DecodeEntry(kind entry.Kind, msg []byte) (entry.Entry, error) {
	payload, id, kept, err := decode(kind, msg)
	if err != nil {
		return entry.Entry{}, err
	}
	return entry.Entry{Kind: kind, ID: id, Payload: payload, Opaque: kept}, nil
}

// decode is Decode, and reports whether something of msg was kept as sent.
func decode(kind entry.Kind, msg []byte) (payload, id []byte, kept bool, err error) {
	switch kind {
	case entry.KindFlow, entry.KindMeter:
		b := msg // canonicalFlow only reads it, and copies it with xid 0
		if kind != entry.KindFlow || entry.CheckFlow(msg) != nil {
			var err error
			if b, _, err = entry.Identify(kind, msg); err != nil {
				return nil, nil, false, err
			}
		}
		var err error
		if kind == entry.KindFlow {
			b, err = canonicalFlow(b, &kept)
		} else {
			b, err = canonicalMeter(b, &kept)
		}
		if err != nil {
			return nil, nil, false, fmt.Errorf("%s: %w", kind, err)
		}
		if kind == entry.KindFlow {
			payload, id, err = entry.IdentifyOwned(kind, b) // built here, held by nobody
		} else {
			payload, id, err = entry.Identify(kind, b)
		}
		return payload, id, kept, err
	case entry.KindGroup:
		msgs, err := entry.SplitMessages(msg)
		if err != nil {
			return nil, nil, false, err
		}
		if len(msgs) == 0 {
			return nil, nil, false, fmt.Errorf("group: no message")
		}
		g, err := decodeGroup(msgs, &kept)
		if err != nil {
			return nil, nil, false, fmt.Errorf("group: %w", err)
		}
		payload, id, err = encodeGroup(g)
		return payload, id, kept, err
	}
	return nil, nil, false, fmt.Errorf("invalid entry kind %d", kind)
}

// IsInsertBucket reports whether msg is a GROUP_MOD INSERT_BUCKET: a piece
// of a group that Join adds to the group's ADD.
func IsInsertBucket(kind entry.Kind, msg []byte) bool {
	return kind == entry.KindGroup && len(msg) >= groupModFixed && msg[0] == ofVersion15 &&
		msg[1] == typeGroupMod && entry.ModCommand(msg) == groupCmdInsertBucket
}

// Join adds the buckets of insert (GROUP_MOD INSERT_BUCKET messages of the
// same group) to the canonical payload of a group and returns the new
// payload, and whether part of it is kept as sent; a controller that splits
// a large group as OVS needs it sends the pieces as entries that follow
// each other.
func Join(payload, insert []byte) (joined []byte, opaque bool, err error) {
	msgs, err := entry.SplitMessages(append(append([]byte(nil), payload...), insert...))
	if err != nil {
		return nil, false, err
	}
	g, err := decodeGroup(msgs, &opaque)
	if err != nil {
		return nil, false, fmt.Errorf("group: %w", err)
	}
	joined, _, err = encodeGroup(g)
	return joined, opaque, err
}

func encodeGroup(g *entry.Group) (payload, id []byte, err error) {
	if len(g.Buckets) > MaxBuckets {
		return nil, nil, fmt.Errorf("group %d has %d buckets, more than the %d whose stats OVS 3.1 can report (the stats of a larger group pass 64 KiB, and vswitchd wraps their length or aborts)",
			g.ID, len(g.Buckets), MaxBuckets)
	}
	b, err := g.Encode()
	if err != nil {
		return nil, nil, err
	}
	return entry.Identify(entry.KindGroup, b)
}

// Parse parses one entry in ovs-ofctl syntax (`add-flow`, `add-group`,
// `add-meter`) into its canonical payload and identity. Errors are
// *ofctl.SyntaxError where the text is at fault.
func Parse(kind entry.Kind, text string) (payload, id []byte, err error) {
	if len(text) > MaxText {
		return nil, nil, fmt.Errorf("text of %d bytes exceeds %d", len(text), MaxText)
	}
	var raw []byte
	switch kind {
	case entry.KindFlow:
		// Encoded without libOpenflow's model of the flow, which costs
		// more than the parse.
		var err error
		if raw, err = ofctl.ParseFlowBinary(text); err != nil {
			return nil, nil, err
		}
	case entry.KindGroup:
		gp, err := ofctl.ParseGroupParts(text)
		if err != nil {
			return nil, nil, err
		}
		// ofctl encodes as OVS does: nothing to re-encode.
		return encodeGroup(&entry.Group{Type: gp.Type, ID: gp.ID, Buckets: gp.Buckets, Props: gp.Properties})
	case entry.KindMeter:
		mm, err := ofctl.ParseMeter(text)
		if err != nil {
			return nil, nil, err
		}
		if raw, err = mm.MarshalBinary(); err != nil {
			return nil, nil, fmt.Errorf("encoding: %w", err)
		}
	default:
		return nil, nil, fmt.Errorf("invalid entry kind %d", kind)
	}
	if kind == entry.KindFlow {
		return entry.IdentifyOwned(kind, raw) // built here, held by nobody
	}
	return entry.Identify(kind, raw)
}

// ParseDelete parses the text that names an entry to delete and returns its
// identity and a payload that carries it: a flow by table, priority and
// match, as `ovs-ofctl del-flows --strict` takes it (actions optional); a
// group by "group_id=N" and a meter by "meter=N" (or controller, slowpath),
// as del-groups and del-meters take them.
func ParseDelete(kind entry.Kind, text string) (payload, id []byte, err error) {
	switch kind {
	case entry.KindFlow:
		if !strings.Contains(text, "actions") {
			text += ",actions=drop"
		}
		return Parse(kind, text)
	case entry.KindGroup:
		n, err := ofctl.ParseGroupID(text)
		if err != nil {
			return nil, nil, err
		}
		return entry.Identify(kind, entry.WithCommand(entry.DeleteGroup(binary.BigEndian.AppendUint32(nil, n)), 0))
	case entry.KindMeter:
		n, err := ofctl.ParseMeterID(text)
		if err != nil {
			return nil, nil, err
		}
		return entry.Identify(kind, entry.WithCommand(entry.DeleteMeter(binary.BigEndian.AppendUint32(nil, n)), 0))
	}
	return nil, nil, fmt.Errorf("invalid entry kind %d", kind)
}

// DecodeDelete returns the identity of the entry an encoded message names
// for a delete: a flow's match is canonicalised (its identity depends on
// it); of a group or meter only the id counts.
func DecodeDelete(kind entry.Kind, msg []byte) (payload, id []byte, err error) {
	if kind == entry.KindFlow {
		return Decode(kind, msg)
	}
	if kind == entry.KindGroup && len(msg) > headerLen && int(binary.BigEndian.Uint16(msg[2:])) < len(msg) {
		msg = msg[:binary.BigEndian.Uint16(msg[2:])]
	}
	return entry.Identify(kind, msg)
}

// Format prints a canonical entry in ovs-ofctl syntax, as `ovs-ofctl -O
// OpenFlow15 dump-flows/dump-groups/dump-meters` print it (a large group as
// one group).
func Format(kind entry.Kind, payload []byte) (string, error) {
	switch kind {
	case entry.KindFlow:
		return ofctl.FormatFlowMod(payload)
	case entry.KindGroup:
		return groupText(payload)
	case entry.KindMeter:
		return ofctl.FormatMeterMod(payload)
	}
	return "", fmt.Errorf("invalid entry kind %d", kind)
}

// Messages returns the messages that put a canonical entry on the switch:
// its ADD, or for a group or meter the switch already holds (modify) its
// MODIFY. A group of several messages stays ADD (or MODIFY) plus its
// INSERT_BUCKET messages, which must go in that order in one bundle. Each
// message is at most MaxMessage bytes.
func Messages(kind entry.Kind, modify bool, payload []byte) [][]byte {
	msgs := [][]byte{payload}
	if kind == entry.KindGroup {
		msgs = entry.GroupMessages(payload)
	}
	if modify && kind != entry.KindFlow { // a flow's ADD replaces it
		msgs[0] = entry.WithModify(msgs[0])
	}
	return msgs
}
