package server

import (
	"context"
	"fmt"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
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
	bootID    string
	coldStart bool
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

func (s *service) Put(ctx context.Context, req *flowstatev1.PutRequest) (*flowstatev1.PutResponse, error) {
	if err := validateTarget(req.GetBridge(), req.GetModule()); err != nil {
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
	if err := validateTarget(req.GetBridge(), req.GetModule()); err != nil {
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
	resp := &flowstatev1.StatusResponse{BootId: s.bootID, ColdStart: s.coldStart}
	resp.FlowRestoreWait, resp.OvsdbConnected = s.engine.FlowRestoreWait()
	perBridge := map[string]*flowstatev1.BridgeStatus{}
	for _, bs := range s.engine.Status() {
		pb := toBridgeStatus(bs)
		perBridge[bs.Name] = pb
		resp.Bridges = append(resp.Bridges, pb)
	}
	for _, c := range counts {
		resp.Modules = append(resp.Modules, &flowstatev1.ModuleStatus{
			Bridge: c.Bridge, Name: c.Module,
			Flows: uint32(c.Flows), Groups: uint32(c.Groups), Meters: uint32(c.Meters),
		})
		if pb := perBridge[c.Bridge]; pb != nil {
			pb.Flows += uint32(c.Flows)
			pb.Groups += uint32(c.Groups)
			pb.Meters += uint32(c.Meters)
		}
	}
	return resp, nil
}
