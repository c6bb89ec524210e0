package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/restore/write"
	"github.com/flowstate-io/flowstate/store"
)

// DefaultStageAbove is the default of Config.StageAbove: the number of
// entries past which a streamed write is staged on disk (store.Spool,
// store.Stage), which needs about the memory of 50,000 entries whatever its
// size. Below it a write costs about 1.2 KB an entry while it runs (the
// request, the store's result, bbolt's dirty pages): 60 MB at most.
const DefaultStageAbove = 50_000

// entryMessage is a message of a client stream of entries (PutStream, Sync).
type entryMessage interface {
	GetBridge() string
	GetModule() string
	GetEntries() []*flowstatev1.Entry
}

// received is a streamed write request in canonical form: in memory (es),
// or, past Config.StageAbove entries, on disk (spool). Its owner closes it.
type received struct {
	bridge, module string
	es             []entry.Entry
	spool          *store.Spool
}

func (r *received) len() int {
	if r.spool != nil {
		return r.spool.Len()
	}
	return len(r.es)
}

// declared hands r's entries to a write. A spool goes to the engine, which
// closes it (it may still be writing it after the call returned, when the
// caller gave up): r no longer does.
func (r *received) declared() write.Declared {
	if sp := r.spool; sp != nil {
		r.spool = nil
		return write.Declared{Spool: sp}
	}
	return write.Declared{Entries: r.es}
}

func (r *received) close() {
	if r.spool != nil {
		_ = r.spool.Close()
	}
}

// recvEntries receives a client stream of entries for one bridge and module
// and returns them in canonical form. Each message is converted as it
// arrives, so the request is held once, as canonical entries, or, past
// Config.StageAbove entries, written to a spool a run at a time. It returns at the
// first error (a broken stream, an entry refused, a message over
// MaxMessageBytes, which gRPC refuses with RESOURCE_EXHAUSTED before the
// handler sees it) having written nothing: a streamed request is all or
// nothing like any other. each, if set, sees every message.
func recvEntries[M entryMessage](ctx context.Context, s *service, recv func() (M, error), each func(M)) (_ *received, err error) {
	r := &received{}
	defer func() {
		if err != nil {
			r.close() // after stop (below): the converter is done with r
		}
	}()
	// Converting a message (parsing text, canonicalising) costs more than
	// receiving and decoding it: one goroutine converts, on every CPU, while
	// this one receives the next, in order. It ends when conv is closed, and
	// reports a refused entry at once through refused.
	var conv chan M
	var refused, converted chan error
	stop := func() error {
		if conv == nil {
			return nil
		}
		close(conv)
		conv = nil
		return <-converted
	}
	defer func() { _ = stop() }()
	n := 0
	for first := true; ; first = false {
		req, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if first {
			r.bridge, r.module = req.GetBridge(), req.GetModule()
			if err := s.validateWrite(ctx, r.bridge, r.module); err != nil {
				return nil, err
			}
			conv, refused, converted = make(chan M, 2), make(chan error, 1), make(chan error, 1)
			go func(in <-chan M) {
				var err error
				for m := range in {
					if err == nil {
						if err = s.convert(r, m.GetEntries()); err != nil {
							refused <- err
						}
					}
				}
				converted <- err
			}(conv)
		} else if (req.GetBridge() != "" && req.GetBridge() != r.bridge) || (req.GetModule() != "" && req.GetModule() != r.module) {
			return nil, fmt.Errorf("bridge and module must not change within a stream: %w", errdefs.ErrInvalidArgument)
		}
		if each != nil {
			each(req)
		}
		if n += len(req.GetEntries()); n > MaxEntriesPerRequest {
			return nil, errTooManyEntries(n)
		}
		select {
		case err := <-refused:
			return nil, err
		case conv <- req:
		}
	}
	if r.bridge == "" {
		return nil, fmt.Errorf("empty stream: the first message names the bridge and module: %w", errdefs.ErrInvalidArgument)
	}
	if err := stop(); err != nil {
		return nil, err
	}
	if r.spool != nil {
		if err := s.spool(r, 0); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// convert appends in, the next entries of a streamed request, to r. It runs
// on recvEntries's converter goroutine, which owns r until stop returns.
// r.es holds what is not spooled yet: the whole request up to
// Config.StageAbove entries, then only its last entry, which an
// INSERT_BUCKET at the start of the next message may still join.
func (s *service) convert(r *received, in []*flowstatev1.Entry) error {
	base := 0 // the request index of r.es[0]
	if r.spool != nil {
		base = r.spool.Len()
	}
	var err error
	if r.es, err = appendEntriesParallel(r.es, r.module, in); err != nil {
		var ee *errdefs.EntryError
		if errors.As(err, &ee) {
			ee.Index += base
		}
		return err
	}
	if r.spool == nil {
		if len(r.es) <= s.stageAbove {
			return nil
		}
		if r.spool, err = s.store.Staging().NewSpool(); err != nil {
			return err
		}
	}
	return s.spool(r, 1)
}

// spool moves r.es to its spool but for the last keep entries, checking them
// as Put would (the owned cookie space).
func (s *service) spool(r *received, keep int) error {
	n := len(r.es) - keep
	if n <= 0 {
		return nil
	}
	if err := write.CheckOwned(s.owned, r.es[:n], r.spool.Len()); err != nil {
		return err
	}
	if err := r.spool.Add(r.es[:n]); err != nil {
		return err
	}
	// The spool copied the entries (not their bytes): the array is free.
	r.es = append(r.es[:0], r.es[n:]...)
	return nil
}

func (s *service) PutStream(stream flowstatev1.FlowStateService_PutStreamServer) error {
	r, err := recvEntries(stream.Context(), s, stream.Recv, nil)
	if err != nil {
		return toGRPC(err)
	}
	defer r.close()
	n := r.len()
	if n == 0 {
		return toGRPC(fmt.Errorf("no entries: %w", errdefs.ErrInvalidArgument))
	}
	applied, err := s.writes.Put(stream.Context(), r.bridge, r.module, r.declared())
	if err != nil {
		return toGRPC(err)
	}
	return stream.SendAndClose(&flowstatev1.PutStreamResponse{Applied: applied, Stored: uint32(n)})
}

func (s *service) Sync(stream flowstatev1.FlowStateService_SyncServer) error {
	ready := false
	r, err := recvEntries(stream.Context(), s, stream.Recv, func(req *flowstatev1.SyncRequest) {
		ready = ready || req.GetReady()
	})
	if err != nil {
		return toGRPC(err)
	}
	defer r.close()
	n := r.len()
	res, err := s.writes.Sync(stream.Context(), r.bridge, r.module, r.declared(), ready)
	if err != nil {
		return toGRPC(err)
	}
	return stream.SendAndClose(&flowstatev1.SyncResponse{Applied: res.Applied, Stored: uint32(n),
		Removed: uint32(res.Removed), Added: uint32(res.Added), Changed: uint32(res.Changed)})
}
