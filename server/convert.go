package server

import (
	"fmt"
	"strings"

	"antrea.io/libOpenflow/openflow15"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/restore"
)

// Request bounds: a request is one bbolt transaction and one bundle.
const (
	maxEntriesPerRequest = 100000
	maxTextBytes         = 64 << 10
)

// toEntries validates the entries of a write request and converts them to the
// canonical form. Errors name the entry index and, for text, the column.
func toEntries(module string, in []*flowstatev1.Entry, identityOnly bool) ([]entry.Entry, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("no entries: %w", errdefs.ErrInvalidArgument)
	}
	if len(in) > maxEntriesPerRequest {
		return nil, fmt.Errorf("%d entries exceed the limit of %d per request: %w", len(in), maxEntriesPerRequest, errdefs.ErrInvalidArgument)
	}
	out := make([]entry.Entry, len(in))
	for i, pe := range in {
		e, err := toEntry(pe, identityOnly)
		if err != nil {
			return nil, &errdefs.EntryError{Index: i, Err: fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)}
		}
		e.Module = module
		out[i] = e
	}
	return out, nil
}

func toEntry(pe *flowstatev1.Entry, identityOnly bool) (entry.Entry, error) {
	kind := entry.Kind(pe.GetKind())
	if !kind.Valid() {
		return entry.Entry{}, fmt.Errorf("kind %v: want FLOW, GROUP or METER", pe.GetKind())
	}
	if kind != entry.KindFlow {
		return entry.Entry{}, fmt.Errorf("%s entries are not supported yet", kind)
	}
	var raw []byte
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
		fm, err := ofctl.ParseFlow(text)
		if err != nil {
			return entry.Entry{}, err
		}
		if raw, err = fm.MarshalBinary(); err != nil {
			return entry.Entry{}, fmt.Errorf("encoding: %w", err)
		}
	case *flowstatev1.Entry_Openflow:
		fm, err := decodeFlowMod(body.Openflow)
		if err != nil {
			return entry.Entry{}, err
		}
		// Re-encoding drops what the decoder ignores (xid, padding junk).
		if raw, err = fm.MarshalBinary(); err != nil {
			return entry.Entry{}, fmt.Errorf("encoding: %w", err)
		}
	default:
		return entry.Entry{}, fmt.Errorf("no body: give text or openflow")
	}
	payload, id, err := entry.Identify(kind, raw)
	if err != nil {
		return entry.Entry{}, err
	}
	return entry.Entry{Kind: kind, ID: id, Payload: payload}, nil
}

// decodeFlowMod decodes an OpenFlow 1.5 FLOW_MOD, turning the decoder's panics
// on malformed input into errors.
func decodeFlowMod(b []byte) (fm *openflow15.FlowMod, err error) {
	if _, _, err := entry.Identify(entry.KindFlow, b); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			fm, err = nil, fmt.Errorf("malformed FLOW_MOD: %v", r)
		}
	}()
	fm = new(openflow15.FlowMod)
	if err := fm.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("malformed FLOW_MOD: %w", err)
	}
	return fm, nil
}

// toStored converts a stored entry for List, with its ovs-ofctl text.
func toStored(bridge string, e entry.Entry) *flowstatev1.StoredEntry {
	se := &flowstatev1.StoredEntry{
		Bridge:   bridge,
		Module:   e.Module,
		Kind:     flowstatev1.EntryKind(e.Kind),
		Openflow: e.Payload,
	}
	if e.Kind == entry.KindFlow {
		if fm, err := decodeFlowMod(e.Payload); err == nil {
			if text, err := ofctl.FormatFlow(fm); err == nil {
				se.Text = text
			}
		}
	}
	return se
}

func toBridgeStatus(bs restore.BridgeStatus) *flowstatev1.BridgeStatus {
	pb := &flowstatev1.BridgeStatus{Name: bs.Name, Connected: bs.Connected, Converged: bs.Converged}
	if r := bs.Last; !r.Finished.IsZero() {
		pb.LastReplay = &flowstatev1.Replay{
			FinishedAt: timestamppb.New(r.Finished),
			Duration:   durationpb.New(r.Duration),
			Entries:    uint32(r.Entries),
			Messages:   uint32(r.Messages()),
			Bytes:      uint64(r.Bytes),
		}
		if r.Err != nil {
			pb.LastReplay.Error = r.Err.Error()
		}
	}
	return pb
}
