package server

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/restore"
	"github.com/flowstate-io/flowstate/server/restore/plan"
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

// parallelBelow is the size of a message below which appendEntriesParallel
// converts on one CPU: spreading a few entries costs more than it saves.
const parallelBelow = 512

// appendEntriesParallel is appendEntries on every CPU: the flows of a large
// message are converted in parts at once, then appended in order, so the
// error names the first refused entry of the request as appendEntries does.
// A message with groups or meters goes on one CPU: an INSERT_BUCKET joins
// the group before it, so one entry given is not always one entry stored.
func appendEntriesParallel(out []entry.Entry, module string, in []*flowstatev1.Entry) ([]entry.Entry, error) {
	workers := runtime.GOMAXPROCS(0)
	if len(in) < parallelBelow || workers < 2 || slices.ContainsFunc(in, func(pe *flowstatev1.Entry) bool {
		return entry.Kind(pe.GetKind()) != entry.KindFlow
	}) {
		return appendEntries(out, module, in, false)
	}
	size := (len(in) + workers - 1) / workers
	parts := make([][]entry.Entry, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := min(w*size, len(in)), min((w+1)*size, len(in))
		wg.Go(func() { parts[w], errs[w] = appendEntries(nil, module, in[lo:hi], false) })
	}
	wg.Wait()
	base := len(out)
	for w, part := range parts {
		if err := errs[w]; err != nil {
			var ee *errdefs.EntryError
			if errors.As(err, &ee) {
				ee.Index += base + w*size
			}
			return out, err
		}
		out = append(out, part...)
	}
	return out, nil
}

// appendEntries converts in to canonical entries and appends them to out;
// the index an error names counts from the start of out, so a streamed
// request reports the entry's position in the whole stream. Only the
// canonical payload and identity of each entry are kept: the proto message
// can be dropped as soon as it is converted. A GROUP_MOD INSERT_BUCKET joins
// the group's ADD, which must be the entry just before it.
func appendEntries(out []entry.Entry, module string, in []*flowstatev1.Entry, identityOnly bool) ([]entry.Entry, error) {
	for _, pe := range in {
		if msg := pe.GetOpenflow(); !identityOnly && canon.IsInsertBucket(entry.Kind(pe.GetKind()), msg) {
			if err := joinBuckets(out, msg); err != nil {
				return out, &errdefs.EntryError{Index: len(out), Err: fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)}
			}
			continue
		}
		e, err := toEntry(pe, identityOnly)
		if err != nil {
			return out, &errdefs.EntryError{Index: len(out), Err: fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)}
		}
		e.Module = module
		out = append(out, e)
	}
	return out, nil
}

// joinBuckets adds the buckets of an INSERT_BUCKET to the group entry at the
// end of out.
func joinBuckets(out []entry.Entry, msg []byte) error {
	if len(out) == 0 || out[len(out)-1].Kind != entry.KindGroup || !bytes.Equal(out[len(out)-1].ID, entry.ModID(msg)) {
		g, _ := entry.ModRef(entry.KindGroup, msg) // IsInsertBucket checked its length
		return fmt.Errorf("GROUP_MOD INSERT_BUCKET of group %d: it must follow the group's ADD (or another INSERT_BUCKET of it) in the same request", g.ID)
	}
	last := &out[len(out)-1]
	payload, opaque, err := canon.Join(last.Payload, msg)
	if err != nil {
		return err
	}
	last.Payload, last.Opaque = payload, opaque
	return nil
}

func toEntry(pe *flowstatev1.Entry, identityOnly bool) (entry.Entry, error) {
	kind := entry.Kind(pe.GetKind())
	if !kind.Valid() {
		return entry.Entry{}, fmt.Errorf("kind %v: want FLOW, GROUP or METER", pe.GetKind())
	}
	var (
		payload, id []byte
		opaque      bool
		err         error
	)
	switch body := pe.GetBody().(type) {
	case *flowstatev1.Entry_Text:
		if identityOnly {
			payload, id, err = canon.ParseDelete(kind, body.Text)
		} else {
			payload, id, err = canon.Parse(kind, body.Text)
		}
	case *flowstatev1.Entry_Openflow:
		if identityOnly {
			payload, id, err = canon.DecodeDelete(kind, body.Openflow)
			break
		}
		if kind == entry.KindFlow && len(body.Openflow) >= 8 {
			// Checked as sent too: a field canon rebuilds (buffer_id)
			// must not hide what the controller asked for.
			if err := entry.CheckDesiredFlow(body.Openflow); err != nil {
				return entry.Entry{}, err
			}
		}
		var e entry.Entry
		e, err = canon.DecodeEntry(kind, body.Openflow)
		payload, id, opaque = e.Payload, e.ID, e.Opaque
	default:
		return entry.Entry{}, fmt.Errorf("no body: give text or openflow")
	}
	if err != nil {
		return entry.Entry{}, err
	}
	if kind == entry.KindFlow && !identityOnly {
		if err := entry.CheckDesiredFlow(payload); err != nil {
			return entry.Entry{}, err
		}
	}
	return entry.Entry{Kind: kind, ID: id, Payload: payload, Opaque: opaque}, nil
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
	text, err := canon.Format(kind, payload)
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
	pb.LeftAlone, pb.LeftAloneAll = uint32(bs.LeftAlone), bs.LeftAloneAll
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

func toChange(c plan.Change) *flowstatev1.Change {
	pc := &flowstatev1.Change{Kind: flowstatev1.EntryKind(c.Kind), Module: c.Desired.Module}
	switch c.Op {
	case plan.OpAdd:
		pc.Op = flowstatev1.Change_OP_ADD
	case plan.OpModify:
		pc.Op = flowstatev1.Change_OP_MODIFY
	case plan.OpDelete:
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
