package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/restore"
	"github.com/flowstate-io/flowstate/store"
)

// listBatch is the number of entries per List message.
const listBatch = 512

// service implements the gRPC API on top of the restore engine and the store;
// it only validates and converts.
type service struct {
	flowstatev1.UnimplementedFlowStateServiceServer
	engine    *restore.Engine
	store     *store.Store
	events    *events.Log
	writers   Writers
	streamID  string
	bootID    string
	coldStart bool
	keep      *keeper
	sessions  *sessionTable
	log       *slog.Logger
}

var _ flowstatev1.FlowStateServiceServer = (*service)(nil)

func validateTarget(bridge, module string) error {
	if err := entry.ValidateName("bridge", bridge); err != nil {
		return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	if err := entry.ValidateName("module", module); err != nil {
		return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// validateWrite checks the names of a write and that the peer may write the
// module.
func (s *service) validateWrite(ctx context.Context, bridge, module string) error {
	if err := validateTarget(bridge, module); err != nil {
		return err
	}
	if err := s.writers.authorize(ctx, module); err != nil {
		return err
	}
	wrote(ctx, module)
	return nil
}

func (s *service) Put(ctx context.Context, req *flowstatev1.PutRequest) (*flowstatev1.PutResponse, error) {
	if err := s.validateWrite(ctx, req.GetBridge(), req.GetModule()); err != nil {
		return nil, toGRPC(err)
	}
	es, err := toEntries(req.GetModule(), req.GetEntries(), false)
	if err != nil {
		return nil, toGRPC(err)
	}
	applied, err := s.engine.Put(ctx, req.GetBridge(), req.GetModule(), es)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &flowstatev1.PutResponse{Applied: applied, Stored: uint32(len(es))}, nil
}

func (s *service) Delete(ctx context.Context, req *flowstatev1.DeleteRequest) (*flowstatev1.DeleteResponse, error) {
	if err := s.validateWrite(ctx, req.GetBridge(), req.GetModule()); err != nil {
		return nil, toGRPC(err)
	}
	keys, err := toEntries(req.GetModule(), req.GetEntries(), true)
	if err != nil {
		return nil, toGRPC(err)
	}
	applied, n, err := s.engine.Delete(ctx, req.GetBridge(), req.GetModule(), keys)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &flowstatev1.DeleteResponse{Applied: applied, Deleted: uint32(n)}, nil
}

func (s *service) List(req *flowstatev1.ListRequest, stream flowstatev1.FlowStateService_ListServer) error {
	f := store.Filter{Bridge: req.GetBridge(), Module: req.GetModule(), Kind: entry.Kind(req.GetKind())}
	if req.GetKind() != flowstatev1.EntryKind_ENTRY_KIND_UNSPECIFIED && !f.Kind.Valid() {
		return toGRPC(fmt.Errorf("kind %v: %w", req.GetKind(), errdefs.ErrInvalidArgument))
	}
	if req.Table != nil {
		if req.GetTable() > 254 {
			return toGRPC(fmt.Errorf("table %d: want 0-254: %w", req.GetTable(), errdefs.ErrInvalidArgument))
		}
		t := uint8(req.GetTable())
		f.Table = &t
	}
	batch := make([]*flowstatev1.StoredEntry, 0, listBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := stream.Send(&flowstatev1.ListResponse{Entries: batch})
		batch = make([]*flowstatev1.StoredEntry, 0, listBatch)
		return err
	}
	// Collect in one read transaction, send after it: a slow client must not
	// hold a bbolt transaction open (it would block the file's remapping).
	var all []*flowstatev1.StoredEntry
	err := s.store.List(f, func(bridge string, e entry.Entry) error {
		all = append(all, toStored(bridge, e))
		return stream.Context().Err()
	})
	if err != nil {
		return toGRPC(err)
	}
	for _, se := range all {
		batch = append(batch, se)
		if len(batch) == listBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func (s *service) Status(ctx context.Context, _ *flowstatev1.StatusRequest) (*flowstatev1.StatusResponse, error) {
	counts, err := s.engine.Counts()
	if err != nil {
		return nil, toGRPC(err)
	}
	modules, err := s.engine.Modules()
	if err != nil {
		return nil, toGRPC(err)
	}
	g := s.engine.Gate()
	resp := &flowstatev1.StatusResponse{
		BootId: s.bootID, ColdStart: s.coldStart,
		Gate:   &flowstatev1.Gate{Open: g.Open, Reason: g.Reason, TimedOut: g.TimedOut, WaitingFor: g.WaitingFor},
		Guard:  s.keep.status(),
		Wedged: s.keep.wedgedReason(),
	}
	if !g.Deadline.IsZero() {
		resp.Gate.Deadline = timestamppb.New(g.Deadline)
	}
	if t := s.engine.LastRelease(); !t.IsZero() {
		resp.LastRelease = timestamppb.New(t)
	}
	resp.FlowRestoreWait, resp.OvsdbConnected = s.engine.FlowRestoreWait()
	resp.VswitchdAcknowledged = s.engine.VswitchdAcknowledged()
	perBridge := map[string]*flowstatev1.BridgeStatus{}
	for _, bs := range s.engine.Status() {
		pb := toBridgeStatus(bs)
		perBridge[bs.Name] = pb
		resp.Bridges = append(resp.Bridges, pb)
		for _, q := range bs.Quarantined {
			resp.Quarantined = append(resp.Quarantined, &flowstatev1.QuarantinedEntry{
				Entry: toStored(q.Bridge, q.Entry), Error: q.Reason, Since: timestamppb.New(q.Since),
			})
		}
	}
	seen := map[string]bool{}
	for _, c := range counts {
		st := modules[c.Module]
		seen[c.Module] = true
		resp.Modules = append(resp.Modules, &flowstatev1.ModuleStatus{
			Bridge: c.Bridge, Name: c.Module,
			Flows: uint32(c.Flows), Groups: uint32(c.Groups), Meters: uint32(c.Meters),
			Required: st.Required, Ready: st.Ready,
		})
		if pb := perBridge[c.Bridge]; pb != nil {
			pb.Flows += uint32(c.Flows)
			pb.Groups += uint32(c.Groups)
			pb.Meters += uint32(c.Meters)
		}
	}
	// Required or ready modules that hold no entries yet.
	for _, name := range slices.Sorted(maps.Keys(modules)) {
		if !seen[name] {
			st := modules[name]
			resp.Modules = append(resp.Modules, &flowstatev1.ModuleStatus{Name: name, Required: st.Required, Ready: st.Ready})
		}
	}
	for _, ss := range s.sessions.Sessions() {
		resp.Sessions = append(resp.Sessions, &flowstatev1.Session{
			Uid: ss.UID, Gid: ss.GID, Pid: ss.PID, Modules: ss.Modules, Remote: ss.Remote, Calls: ss.Calls,
			Since: timestamppb.New(ss.Since), LastActivity: timestamppb.New(ss.LastActivity),
		})
	}
	return resp, nil
}

func (s *service) Sync(stream flowstatev1.FlowStateService_SyncServer) error {
	var (
		bridge, module string
		ready          bool
		in             []*flowstatev1.Entry
	)
	for first := true; ; first = false {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if first {
			bridge, module = req.GetBridge(), req.GetModule()
			if err := s.validateWrite(stream.Context(), bridge, module); err != nil {
				return toGRPC(err)
			}
		} else if (req.GetBridge() != "" && req.GetBridge() != bridge) || (req.GetModule() != "" && req.GetModule() != module) {
			return toGRPC(fmt.Errorf("bridge and module must not change within a sync: %w", errdefs.ErrInvalidArgument))
		}
		ready = ready || req.GetReady()
		if len(in)+len(req.GetEntries()) > maxEntriesPerRequest {
			return toGRPC(fmt.Errorf("more than %d entries in one sync: %w", maxEntriesPerRequest, errdefs.ErrInvalidArgument))
		}
		in = append(in, req.GetEntries()...)
	}
	if bridge == "" {
		return toGRPC(fmt.Errorf("empty sync stream: %w", errdefs.ErrInvalidArgument))
	}
	var es []entry.Entry
	if len(in) > 0 {
		var err error
		if es, err = toEntries(module, in, false); err != nil {
			return toGRPC(err)
		}
	}
	applied, removed, err := s.engine.Sync(stream.Context(), bridge, module, es, ready)
	if err != nil {
		return toGRPC(err)
	}
	return stream.SendAndClose(&flowstatev1.SyncResponse{Applied: applied, Stored: uint32(len(es)), Removed: uint32(removed)})
}

func (s *service) MarkReady(ctx context.Context, req *flowstatev1.MarkReadyRequest) (*flowstatev1.MarkReadyResponse, error) {
	if err := entry.ValidateName("module", req.GetModule()); err != nil {
		return nil, toGRPC(fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
	}
	if err := s.writers.authorize(ctx, req.GetModule()); err != nil {
		return nil, toGRPC(err)
	}
	wrote(ctx, req.GetModule())
	if err := s.engine.MarkReady(req.GetModule()); err != nil {
		return nil, toGRPC(err)
	}
	return &flowstatev1.MarkReadyResponse{}, nil
}

func (s *service) Reconcile(ctx context.Context, req *flowstatev1.ReconcileRequest) (*flowstatev1.ReconcileResponse, error) {
	// A replay rewrites the bridge: only peers that may write (some module)
	// may ask for one, or a peer could keep the switch busy replaying.
	if err := s.writers.authorizeAny(ctx); err != nil {
		return nil, toGRPC(err)
	}
	names := s.engine.Bridges()
	if req.GetBridge() != "" {
		names = []string{req.GetBridge()}
	}
	resp := &flowstatev1.ReconcileResponse{}
	for _, name := range names {
		bs, err := s.engine.Reconcile(ctx, name)
		if err != nil {
			return nil, toGRPC(fmt.Errorf("bridge %s: %w", name, err))
		}
		resp.Bridges = append(resp.Bridges, toBridgeStatus(bs))
	}
	return resp, nil
}

func (s *service) Arm(ctx context.Context, _ *flowstatev1.ArmRequest) (*flowstatev1.ArmResponse, error) {
	if err := s.writers.authorizeRoot(ctx, "arm flow-restore-wait"); err != nil {
		return nil, toGRPC(err)
	}
	was, err := s.engine.Arm(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &flowstatev1.ArmResponse{WasSet: was}, nil
}

func (s *service) Release(ctx context.Context, _ *flowstatev1.ReleaseRequest) (*flowstatev1.ReleaseResponse, error) {
	if err := s.writers.authorizeRoot(ctx, "release flow-restore-wait"); err != nil {
		return nil, toGRPC(err)
	}
	was, ack, err := s.engine.Release(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &flowstatev1.ReleaseResponse{WasSet: was, AcknowledgedAfter: durationpb.New(ack)}, nil
}

func (s *service) Diff(ctx context.Context, req *flowstatev1.DiffRequest) (*flowstatev1.DiffResponse, error) {
	if err := entry.ValidateName("bridge", req.GetBridge()); err != nil {
		return nil, toGRPC(fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
	}
	cs, err := s.engine.Diff(ctx, req.GetBridge())
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &flowstatev1.DiffResponse{Changes: make([]*flowstatev1.Change, 0, len(cs))}
	for _, c := range cs {
		resp.Changes = append(resp.Changes, toChange(c))
	}
	return resp, nil
}

func (s *service) Watch(req *flowstatev1.WatchRequest, stream flowstatev1.FlowStateService_WatchServer) error {
	from := req.GetFromRevision()
	if from != 0 && req.GetStreamId() != s.streamID {
		return toGRPC(fmt.Errorf("stream %q is gone (flowstated restarted; current stream %q): resync and watch from revision 0: %w",
			req.GetStreamId(), s.streamID, errdefs.ErrFailedPrecondition))
	}
	sub, err := s.events.Subscribe(stream.Context(), from)
	if err != nil {
		return toGRPC(fmt.Errorf("%w: resync and watch from revision 0", err))
	}
	defer sub.Close()
	for ev := range sub.C() {
		if err := stream.Send(&flowstatev1.WatchResponse{Event: toEvent(s.streamID, ev)}); err != nil {
			return err
		}
	}
	if err := sub.Err(); err != nil && stream.Context().Err() == nil {
		return toGRPC(err)
	}
	return nil
}
