package server

import (
	"bufio"
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/server/ofconn"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// backupChunk is the size of a Backup message.
const backupChunk = 256 << 10

// switchReader reads a bridge's switch against its desired state, under the
// bridge's lock (FlowStats, Diff).
type switchReader interface {
	FlowCounters(ctx context.Context, bridge string) (map[string]ofconn.FlowCounters, error)
	Diff(ctx context.Context, bridge string, fn func(plan.Change) error) error
}

// FlowStats joins the desired flows with the counters the switch holds now.
// The dump comes first, then the store is read: a flow added in between
// shows as not installed.
func (s *service) FlowStats(req *flowstatev1.FlowStatsRequest, stream flowstatev1.FlowStateService_FlowStatsServer) error {
	if err := entry.ValidateName("bridge", req.GetBridge()); err != nil {
		return toGRPC(fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
	}
	f := store.Filter{Bridge: req.GetBridge(), Module: req.GetModule(), Kind: entry.KindFlow}
	if req.Table != nil {
		if req.GetTable() > 254 {
			return toGRPC(fmt.Errorf("table %d: want 0-254: %w", req.GetTable(), errdefs.ErrInvalidArgument))
		}
		t := uint8(req.GetTable())
		f.Table = &t
	}
	counters, err := s.reads.FlowCounters(stream.Context(), req.GetBridge())
	if err != nil {
		return toGRPC(err)
	}
	// As List: collect from the store, send after.
	var all []*flowstatev1.FlowStats
	err = s.store.Entries().List(f, func(bridge string, e entry.Entry) error {
		fs := &flowstatev1.FlowStats{Entry: toStored(bridge, e)}
		if c, ok := counters[string(e.ID)]; ok {
			fs.Installed, fs.PacketCount, fs.ByteCount, fs.Duration = true, c.Packets, c.Bytes, durationpb.New(c.Duration)
		}
		all = append(all, fs)
		return stream.Context().Err()
	})
	if err != nil {
		return toGRPC(err)
	}
	for len(all) > 0 {
		n := min(len(all), replyBatch)
		if err := stream.Send(&flowstatev1.FlowStatsResponse{Flows: all[:n]}); err != nil {
			return err
		}
		all = all[n:]
	}
	return nil
}

// Backup streams a snapshot of the store, taken in one read transaction
// into a local spool and sent from there (store.File.Backup): a client that stops
// reading holds no transaction. It is open to root and to the peers that
// may write some module (--module-writer), as writes are.
func (s *service) Backup(_ *flowstatev1.BackupRequest, stream flowstatev1.FlowStateService_BackupServer) error {
	if err := s.writers.authorizeWriter(stream.Context(), "take a backup of the store"); err != nil {
		return toGRPC(err)
	}
	start := time.Now()
	// bbolt writes a page at a time; send fewer, larger messages.
	bw := bufio.NewWriterSize(&chunkSender{send: stream.Send}, backupChunk)
	n, err := s.store.File().Backup(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return toGRPC(err)
	}
	s.log.Info("store backup sent", "bytes", n, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// chunkSender sends what is written to it as BackupResponse messages of at
// most backupChunk bytes. Send marshals at once, so p may be reused.
type chunkSender struct {
	send func(*flowstatev1.BackupResponse) error
}

func (w *chunkSender) Write(p []byte) (int, error) {
	for done := 0; done < len(p); {
		n := min(len(p)-done, backupChunk)
		if err := w.send(&flowstatev1.BackupResponse{Data: p[done : done+n]}); err != nil {
			return done, fmt.Errorf("sending backup: %w", err)
		}
		done += n
	}
	return len(p), nil
}
