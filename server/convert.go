package server

import (
	"encoding/binary"
	"fmt"
	"strings"

	"antrea.io/libOpenflow/openflow15"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/restore"
)

// Request bounds: a request is one bbolt transaction and one bundle, held in
// memory as canonical entries (about 250 bytes each) until it is written.
const (
	// MaxEntriesPerRequest bounds the entries of one write, streamed or not:
	// twice the largest set a node is expected to carry, so a runaway client
	// cannot make flowstated hold gigabytes.
	MaxEntriesPerRequest = 2_000_000
	// MaxMessageBytes is the largest gRPC message flowstated receives
	// (grpc.MaxRecvMsgSize; gRPC's default is 4 MiB). A request larger than
	// that goes as a stream (PutStream, Sync) of smaller messages.
	MaxMessageBytes = 16 << 20
	maxTextBytes    = 64 << 10
)

// errTooManyEntries is the refusal of a request over MaxEntriesPerRequest.
func errTooManyEntries(n int) error {
	return fmt.Errorf("%d entries in one request exceed the limit of %d: split the set between modules (each module's set is written separately): %w",
		n, MaxEntriesPerRequest, errdefs.ErrInvalidArgument)
}

// toEntries validates the entries of a write request and converts them to the
// canonical form. Errors name the entry index and, for text, the column.
func toEntries(module string, in []*flowstatev1.Entry, identityOnly bool) ([]entry.Entry, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("no entries: %w", errdefs.ErrInvalidArgument)
	}
	if len(in) > MaxEntriesPerRequest {
		return nil, errTooManyEntries(len(in))
	}
	return appendEntries(make([]entry.Entry, 0, len(in)), module, in, identityOnly)
}

// appendEntries converts in to canonical entries and appends them to out;
// the index an error names counts from the start of out, so a streamed
// request reports the entry's position in the whole stream. Only the
// canonical payload and identity of each entry are kept: the proto message
// can be dropped as soon as it is converted.
func appendEntries(out []entry.Entry, module string, in []*flowstatev1.Entry, identityOnly bool) ([]entry.Entry, error) {
	for _, pe := range in {
		e, err := toEntry(pe, identityOnly)
		if err != nil {
			return out, &errdefs.EntryError{Index: len(out), Err: fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)}
		}
		e.Module = module
		out = append(out, e)
	}
	return out, nil
}

func toEntry(pe *flowstatev1.Entry, identityOnly bool) (entry.Entry, error) {
	kind := entry.Kind(pe.GetKind())
	if !kind.Valid() {
		return entry.Entry{}, fmt.Errorf("kind %v: want FLOW, GROUP or METER", pe.GetKind())
	}
	if kind != entry.KindFlow {
		return toGroupOrMeter(kind, pe, identityOnly)
	}
	var raw []byte
	var fm *openflow15.FlowMod
	switch body := pe.GetBody().(type) {
	case *flowstatev1.Entry_Text:
		if len(body.Text) > maxTextBytes {
			return entry.Entry{}, fmt.Errorf("text of %d bytes exceeds %d", len(body.Text), maxTextBytes)
		}
		text := body.Text
		if identityOnly && !strings.Contains(text, "actions") {
			// A delete names a flow by table, priority and match, as
			// ovs-ofctl del-flows --strict does; the actions do not matter.
			text += ",actions=drop"
		}
		var err error
		if fm, err = ofctl.ParseFlow(text); err != nil {
			return entry.Entry{}, err
		}
		if raw, err = fm.MarshalBinary(); err != nil {
			return entry.Entry{}, fmt.Errorf("encoding: %w", err)
		}
	case *flowstatev1.Entry_Openflow:
		var err error
		if _, raw, err = canonicalFlowMod(body.Openflow); err != nil {
			return entry.Entry{}, err
		}
		// Checked as sent: canonicalising goes through the text form,
		// which does not carry every field (buffer_id).
		if !identityOnly {
			if err := entry.CheckDesiredFlow(body.Openflow); err != nil {
				return entry.Entry{}, err
			}
		}
	default:
		return entry.Entry{}, fmt.Errorf("no body: give text or openflow")
	}
	payload, id, err := entry.Identify(kind, raw)
	if err != nil {
		return entry.Entry{}, err
	}
	if !identityOnly {
		if err := entry.CheckDesiredFlow(payload); err != nil {
			return entry.Entry{}, err
		}
	}
	return entry.Entry{Kind: kind, ID: id, Payload: payload}, nil
}

// toGroupOrMeter accepts groups and meters as encoded GROUP_MOD / METER_MOD.
// For a delete, text names the id: "group_id=N" or "meter=N".
func toGroupOrMeter(kind entry.Kind, pe *flowstatev1.Entry, identityOnly bool) (entry.Entry, error) {
	switch body := pe.GetBody().(type) {
	case *flowstatev1.Entry_Openflow:
		payload, id, err := entry.Identify(kind, body.Openflow)
		if err != nil {
			return entry.Entry{}, err
		}
		return entry.Entry{Kind: kind, ID: id, Payload: payload}, nil
	case *flowstatev1.Entry_Text:
		raw, err := parseGroupOrMeter(kind, body.Text, identityOnly)
		if err != nil {
			return entry.Entry{}, err
		}
		payload, id, err := entry.Identify(kind, raw)
		if err != nil {
			return entry.Entry{}, err
		}
		return entry.Entry{Kind: kind, ID: id, Payload: payload}, nil
	}
	return entry.Entry{}, fmt.Errorf("no body: give text or openflow")
}

// canonicalFlowMod brings an encoded FLOW_MOD to the canonical form: printed
// in ovs-ofctl syntax and parsed back, its match fields come out in OVS's
// order with their prerequisites and loads become set_field, so its identity
// matches what the switch dumps whatever order the controller used.
func canonicalFlowMod(b []byte) (*openflow15.FlowMod, []byte, error) {
	fm, err := decodeFlowMod(b)
	if err != nil {
		return nil, nil, err
	}
	text, err := ofctl.FormatFlow(fm)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot canonicalise the FLOW_MOD: %w", err)
	}
	if fm, err = ofctl.ParseFlow(text); err != nil {
		return nil, nil, fmt.Errorf("cannot canonicalise the FLOW_MOD (%q): %w", text, err)
	}
	raw, err := fm.MarshalBinary()
	if err != nil {
		return nil, nil, fmt.Errorf("encoding: %w", err)
	}
	return fm, raw, nil
}

// decodeFlowMod checks and decodes an OpenFlow 1.5 FLOW_MOD. ofctl's decoder
// keeps what libOpenflow's loses (MAC addresses, actions it does not know).
func decodeFlowMod(b []byte) (*openflow15.FlowMod, error) {
	if _, _, err := entry.Identify(entry.KindFlow, b); err != nil {
		return nil, err
	}
	fm, err := ofctl.DecodeFlowMod(b)
	if err != nil {
		return nil, fmt.Errorf("malformed FLOW_MOD: %w", err)
	}
	return fm, nil
}

// toStored converts a stored entry for List, with its ovs-ofctl text.
func toStored(bridge string, e entry.Entry) *flowstatev1.StoredEntry {
	return &flowstatev1.StoredEntry{
		Bridge:   bridge,
		Module:   e.Module,
		Kind:     flowstatev1.EntryKind(e.Kind),
		Text:     formatEntry(e.Kind, e.Payload),
		Openflow: e.Payload,
	}
}

// describeEntry prints an entry for the store's error messages: its module
// and its ovs-ofctl text.
func describeEntry(e entry.Entry) string {
	return fmt.Sprintf("%s (module %s)", formatEntry(e.Kind, e.Payload), e.Module)
}

// formatEntry prints a canonical entry in ovs-ofctl syntax; an entry the
// printer cannot render is shown as hex rather than hidden.
func formatEntry(kind entry.Kind, payload []byte) string {
	var (
		text string
		err  error
	)
	switch kind {
	case entry.KindFlow:
		text, err = ofctl.FormatFlowMod(payload)
	case entry.KindGroup:
		text, err = ofctl.FormatGroupMod(payload)
	case entry.KindMeter:
		text, err = ofctl.FormatMeterMod(payload)
	}
	if err != nil {
		return fmt.Sprintf("%s (unprintable: %v) %x", kind, err, payload)
	}
	return text
}

func toBridgeStatus(bs restore.BridgeStatus) *flowstatev1.BridgeStatus {
	pb := &flowstatev1.BridgeStatus{Name: bs.Name, Connected: bs.Connected, Converged: bs.Converged,
		Reason: bs.Reason, Excused: bs.Excused}
	if !bs.Since.IsZero() {
		pb.Since = timestamppb.New(bs.Since)
	}
	pb.DriftFound = uint32(bs.DriftFound)
	if !bs.LastDrift.IsZero() {
		pb.LastDrift = timestamppb.New(bs.LastDrift)
	}
	if r := bs.Last; !r.Finished.IsZero() {
		pb.LastReplay = &flowstatev1.Replay{
			FinishedAt: timestamppb.New(r.Finished),
			Duration:   durationpb.New(r.Duration),
			Entries:    uint32(r.Entries),
			Messages:   uint32(r.Messages),
			Bytes:      uint64(r.Bytes),
		}
		if r.Err != nil {
			pb.LastReplay.Error = r.Err.Error()
		}
	}
	return pb
}

// parseGroupOrMeter parses group or meter text. A delete needs only the id
// ("group_id=N", "meter=N"), built here; full entries use package ofctl.
func parseGroupOrMeter(kind entry.Kind, text string, identityOnly bool) ([]byte, error) {
	if identityOnly {
		// A delete names only the id: group_id=N, meter=N (or controller,
		// slowpath), as ovs-ofctl del-groups and del-meters take them.
		if kind == entry.KindGroup {
			id, err := ofctl.ParseGroupID(text)
			if err != nil {
				return nil, err
			}
			return entry.WithCommand(entry.DeleteGroup(binary.BigEndian.AppendUint32(nil, id)), 0), nil
		}
		id, err := ofctl.ParseMeterID(text)
		if err != nil {
			return nil, err
		}
		return entry.WithCommand(entry.DeleteMeter(binary.BigEndian.AppendUint32(nil, id)), 0), nil
	}
	var (
		msg interface{ MarshalBinary() ([]byte, error) }
		err error
	)
	if kind == entry.KindGroup {
		msg, err = ofctl.ParseGroup(text)
	} else {
		msg, err = ofctl.ParseMeter(text)
	}
	if err != nil {
		return nil, err
	}
	return msg.MarshalBinary()
}

func toChange(c restore.Change) *flowstatev1.Change {
	pc := &flowstatev1.Change{Kind: flowstatev1.EntryKind(c.Kind), Module: c.Desired.Module}
	switch c.Op {
	case restore.OpAdd:
		pc.Op = flowstatev1.Change_OP_ADD
	case restore.OpModify:
		pc.Op = flowstatev1.Change_OP_MODIFY
	case restore.OpDelete:
		pc.Op = flowstatev1.Change_OP_DELETE
	}
	if c.Desired.Payload != nil {
		pc.Desired = formatEntry(c.Kind, c.Desired.Payload)
	}
	if c.Actual != nil {
		pc.Actual = formatEntry(c.Kind, c.Actual)
	}
	return pc
}

func toEvent(streamID string, ev events.Event) *flowstatev1.Event {
	return &flowstatev1.Event{
		Revision: ev.Revision, StreamId: streamID, Time: timestamppb.New(ev.Time), Type: string(ev.Type),
		EventType: eventTypes[ev.Type],
		Bridge:    ev.Bridge, Module: ev.Module, Message: ev.Message, Attrs: ev.Attrs,
	}
}

// eventTypes maps events.Types onto the enum by position (TestEventTypes).
var eventTypes = func() map[events.Type]flowstatev1.EventType {
	m := make(map[events.Type]flowstatev1.EventType, len(events.Types))
	for i, t := range events.Types {
		m[t] = flowstatev1.EventType(i + 1)
	}
	return m
}()
