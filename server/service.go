package server

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/internal/version"
	"github.com/flowstate-io/flowstate/server/events"
	"github.com/flowstate-io/flowstate/server/restore"
	"github.com/flowstate-io/flowstate/server/restore/gate"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/server/restore/vswitchd"
	"github.com/flowstate-io/flowstate/server/restore/write"
	"github.com/flowstate-io/flowstate/store"
)

// Replies that carry entries or changes go in batches of at most
// replyBatch items and about replyBatchBytes, far below the 4 MiB a gRPC
// client accepts by default, whatever the size of an entry.
const (
	replyBatch      = 512
	replyBatchBytes = 1 << 20
)

// maxStatusQuarantined bounds the quarantined entries listed in a Status
// reply (StatusResponse.quarantined_total counts them all): about 400 KiB.
const maxStatusQuarantined = 1000

// batcher collects the items of a streamed reply and sends a batch when it
// holds replyBatch items or replyBatchBytes.
type batcher[T any] struct {
	send  func([]T) error
	items []T
	bytes int
}

func (b *batcher[T]) add(item T, size int) error {
	b.items = append(b.items, item)
	b.bytes += size
	if len(b.items) < replyBatch && b.bytes < replyBatchBytes {
		return nil
	}
	return b.flush()
}

func (b *batcher[T]) flush() error {
	if len(b.items) == 0 {
		return nil
	}
	err := b.send(b.items)
	b.items, b.bytes = nil, 0
	return err
}

// service implements the gRPC API on top of the restore engine and the store;
// it only validates and converts. It reaches the engine through one narrow
// interface per concern: a room's as package restore hands it on
// (restore.Writes, restore.Flag), the engine's own methods through
// interfaces declared where their calls are.
type service struct {
	flowstatev1.UnimplementedFlowStateServiceServer
	writes    restore.Writes // receive.go
	reads     switchReader   // inspect.go
	state     stateReader
	ready     readiness
	replays   reconciler
	flag      restore.Flag
	store     *store.Store
	events    *events.Log
	writers   Writers
	streamID  string
	bootID    string
	coldStart bool
	keep      *keeper
	sessions  *sessionTable
	log       *slog.Logger
	// stageAbove is Config.StageAbove.
	stageAbove int
	// faults is Config.Faults (nil in production).
	faults *Faults
	// proxies are the OpenFlow proxies (proxies.go), for Status.
	proxies *proxies
	// ovn is the node's ovn-controller (ovn.go), for Status.
	ovn *ovnController
	// owned is Config.OwnedCookie: the engine's, which the service checks
	// a spooled request's entries against as they arrive, and reports.
	owned entry.CookieSpace
}

var _ flowstatev1.FlowStateServiceServer = (*service)(nil)

// stateReader is the engine's state as Status and knownModules read it.
type stateReader interface {
	Status() []restore.BridgeStatus
	Gate() gate.Status
	Modules() (map[string]restore.ModuleState, error)
	VswitchdInfo() vswitchd.Info
}

// readiness takes a module's ready mark (MarkReady) for the cold-start gate.
type readiness interface {
	MarkReady(module string) error
}

// reconciler replays a bridge on request (Reconcile).
type reconciler interface {
	Bridges() []string
	Reconcile(ctx context.Context, bridge string) (restore.BridgeStatus, error)
}

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
	applied, err := s.writes.Put(ctx, req.GetBridge(), req.GetModule(), write.Declared{Entries: es})
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
	applied, n, err := s.writes.Delete(ctx, req.GetBridge(), req.GetModule(), keys)
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
	// Collect (the store reads in short transactions of its own chunks),
	// send after: a slow client must not hold a bbolt transaction open (it
	// would keep freed pages from reuse and block the file's remapping).
	// The entries are kept as stored (copies of their canonical payloads);
	// their text is rendered batch by batch as they are sent.
	type stored struct {
		bridge string
		e      entry.Entry
	}
	var all []stored
	err := s.store.Entries().List(f, func(bridge string, e entry.Entry) error {
		all = append(all, stored{bridge, e})
		return stream.Context().Err()
	})
	if err != nil {
		return toGRPC(err)
	}
	b := batcher[*flowstatev1.StoredEntry]{send: func(es []*flowstatev1.StoredEntry) error {
		return stream.Send(&flowstatev1.ListResponse{Entries: es})
	}}
	for i := range all {
		se := toStored(all[i].bridge, all[i].e)
		all[i] = stored{} // let the payload go once it is in a message
		if err := b.add(se, len(se.Text)+len(se.Openflow)+len(se.Bridge)+len(se.Module)); err != nil {
			return err
		}
	}
	return b.flush()
}

func (s *service) Status(ctx context.Context, _ *flowstatev1.StatusRequest) (*flowstatev1.StatusResponse, error) {
	counts, err := s.store.Entries().Counts()
	if err != nil {
		return nil, toGRPC(err)
	}
	modules, err := s.state.Modules()
	if err != nil {
		return nil, toGRPC(err)
	}
	g := s.state.Gate()
	resp := &flowstatev1.StatusResponse{
		BootId: s.bootID, ColdStart: s.coldStart,
		Gate:   &flowstatev1.Gate{Open: g.Open, Reason: g.Reason, TimedOut: g.TimedOut, WaitingFor: g.WaitingFor},
		Guard:  s.keep.status(),
		Wedged: s.keep.wedgedReason(),
	}
	resp.OwnedCookieValue, resp.OwnedCookieMask = s.owned.Value&s.owned.Mask, s.owned.Mask
	if !g.Deadline.IsZero() {
		resp.Gate.Deadline = timestamppb.New(g.Deadline)
	}
	fl := s.flag.State()
	if !fl.LastRelease.IsZero() {
		resp.LastRelease = timestamppb.New(fl.LastRelease)
	}
	resp.FlowRestoreWait, resp.OvsdbConnected = fl.On, fl.Connected
	resp.VswitchdAcknowledged = fl.Acknowledged
	resp.VswitchdRunning = fl.VswitchdRunning
	resp.VswitchdHeld = fl.VswitchdRunning && !fl.VswitchdUnheld && fl.On
	sw := s.state.VswitchdInfo()
	resp.VswitchdBuild = &flowstatev1.VswitchdBuild{Version: sw.Version, OvsdbVersion: sw.OVSDBVersion, Limits: sw.Limits}
	resp.OvnController = s.ovn.status(ctx)
	bi := version.Get()
	resp.Version, resp.Commit = bi.Version, bi.Commit
	perBridge := map[string]*flowstatev1.BridgeStatus{}
	for _, bs := range s.state.Status() {
		pb := toBridgeStatus(bs)
		perBridge[bs.Name] = pb
		resp.Bridges = append(resp.Bridges, pb)
		resp.QuarantinedTotal += uint32(bs.QuarantinedTotal)
		listMax := s.faults.statusQuarantined()
		for _, q := range bs.Quarantined {
			if len(resp.Quarantined) >= listMax {
				break
			}
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
	// The caller's own connection is left out: flowctl status would
	// otherwise always list itself.
	self, _ := ctx.Value(sessionKey{}).(*session)
	for _, ss := range s.sessions.Sessions(self) {
		resp.Sessions = append(resp.Sessions, &flowstatev1.Session{
			Uid: ss.UID, Gid: ss.GID, Pid: ss.PID, Modules: ss.Modules, Remote: ss.Remote, Calls: ss.Calls,
			Since: timestamppb.New(ss.Since), LastActivity: timestamppb.New(ss.LastActivity),
		})
	}
	if s.proxies != nil {
		resp.Proxies = s.proxies.status()
	}
	return resp, nil
}

func (s *service) MarkReady(ctx context.Context, req *flowstatev1.MarkReadyRequest) (*flowstatev1.MarkReadyResponse, error) {
	if err := entry.ValidateName("module", req.GetModule()); err != nil {
		return nil, toGRPC(fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
	}
	if err := s.writers.authorize(ctx, req.GetModule()); err != nil {
		return nil, toGRPC(err)
	}
	if err := s.checkKnown(req.GetModule()); err != nil {
		return nil, toGRPC(err)
	}
	wrote(ctx, req.GetModule())
	if err := s.ready.MarkReady(req.GetModule()); err != nil {
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
	names := s.replays.Bridges()
	if req.GetBridge() != "" {
		names = []string{req.GetBridge()}
	}
	resp := &flowstatev1.ReconcileResponse{}
	for _, name := range names {
		bs, err := s.replays.Reconcile(ctx, name)
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
	was, err := s.flag.Arm(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &flowstatev1.ArmResponse{WasSet: was}, nil
}

func (s *service) Release(ctx context.Context, _ *flowstatev1.ReleaseRequest) (*flowstatev1.ReleaseResponse, error) {
	if err := s.writers.authorizeRoot(ctx, "release flow-restore-wait"); err != nil {
		return nil, toGRPC(err)
	}
	was, ack, err := s.flag.Release(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &flowstatev1.ReleaseResponse{WasSet: was, AcknowledgedAfter: durationpb.New(ack)}, nil
}

func (s *service) Diff(req *flowstatev1.DiffRequest, stream flowstatev1.FlowStateService_DiffServer) error {
	if err := entry.ValidateName("bridge", req.GetBridge()); err != nil {
		return toGRPC(fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
	}
	// The engine computes the diff under the bridge's lock, so a client that
	// stops reading must not hold it: batches go to a sender through a short
	// queue, and a queue that does not move for diffStall ends the call.
	queue := make(chan []*flowstatev1.Change, 4)
	sent := make(chan error, 1)
	go func() {
		var err error
		for cs := range queue {
			if err == nil {
				err = stream.Send(&flowstatev1.DiffResponse{Changes: cs})
			}
		}
		sent <- err
	}()
	stallAfter := s.faults.diffStall()
	stall := time.NewTimer(stallAfter)
	defer stall.Stop()
	b := batcher[*flowstatev1.Change]{send: func(cs []*flowstatev1.Change) error {
		stall.Reset(stallAfter)
		select {
		case queue <- cs:
			return nil
		case <-stall.C:
			return fmt.Errorf("the client has not read the diff for %v; the bridge cannot wait for it: %w", stallAfter, errdefs.ErrUnavailable)
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}}
	err := s.reads.Diff(stream.Context(), req.GetBridge(), func(c plan.Change) error {
		pc := toChange(c)
		return b.add(pc, len(pc.Desired)+len(pc.Actual)+len(pc.Module))
	})
	if err == nil {
		err = b.flush()
	}
	close(queue)
	if serr := <-sent; err == nil {
		err = serr
	}
	if err != nil {
		return toGRPC(err)
	}
	return nil
}

// diffStall is how long Diff waits for a client that does not read
// (Faults.DiffStall in tests).
const diffStall = 10 * time.Second

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
	if from == 0 {
		// From now: a first heartbeat names the position at once, so a
		// client that loses flowstated before anything happened can still
		// resume or learn that it must resync, instead of knowing nothing.
		head := events.Event{Revision: sub.Floor(), Time: time.Now(), Type: events.Heartbeat}
		if err := stream.Send(&flowstatev1.WatchResponse{Event: toEvent(s.streamID, head)}); err != nil {
			return err
		}
	}
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
