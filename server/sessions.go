package server

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// Session is one connected gRPC client, as Status reports it.
type Session struct {
	UID, GID uint32
	PID      int32
	Remote   string
	Since    time.Time
	// LastActivity is when the client last started a call; Since if never.
	LastActivity time.Time
	Calls        uint64
	// Modules the client wrote on this connection, sorted.
	Modules []string
}

// session is the live record of one connection. The transport owns its life:
// sessionTable.HandleConn adds it at ConnBegin and removes it at ConnEnd,
// which the server's keepalive brings within Time+Timeout of a frozen peer.
type session struct {
	cred   peerCred
	remote string
	since  time.Time
	last   atomic.Int64 // unix nanoseconds of the last call started
	calls  atomic.Uint64

	mu      sync.Mutex
	modules map[string]bool
}

type sessionKey struct{}

// sessionTable is a grpc stats.Handler that tracks connections and the calls
// on them.
type sessionTable struct {
	log *slog.Logger

	mu   sync.Mutex
	live map[*session]struct{}
}

var _ stats.Handler = (*sessionTable)(nil)

func newSessionTable(log *slog.Logger) *sessionTable {
	return &sessionTable{log: log, live: map[*session]struct{}{}}
}

// TagConn runs after the handshake, so the peer (with its SO_PEERCRED) is in
// ctx.
func (t *sessionTable) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	s := &session{since: time.Now(), modules: map[string]bool{}}
	if info.RemoteAddr != nil {
		s.remote = info.RemoteAddr.String()
	}
	if p, ok := peer.FromContext(ctx); ok {
		s.cred, _ = p.AuthInfo.(peerCred)
	}
	s.last.Store(s.since.UnixNano())
	return context.WithValue(ctx, sessionKey{}, s)
}

func (t *sessionTable) HandleConn(ctx context.Context, st stats.ConnStats) {
	s, _ := ctx.Value(sessionKey{}).(*session)
	if s == nil {
		return
	}
	t.mu.Lock()
	switch st.(type) {
	case *stats.ConnBegin:
		t.live[s] = struct{}{}
	case *stats.ConnEnd:
		delete(t.live, s)
	}
	t.mu.Unlock()
	if _, end := st.(*stats.ConnEnd); end {
		mods := s.snapshot().Modules
		// A writer going away is worth the log; a flowctl run is not.
		lvl := slog.LevelDebug
		if len(mods) > 0 {
			lvl = slog.LevelInfo
		}
		t.log.Log(ctx, lvl, "client session ended", "uid", s.cred.uid, "pid", s.cred.pid, "modules", mods,
			"since", s.since, "idle", time.Since(time.Unix(0, s.last.Load())).Round(time.Millisecond))
	}
}

// TagRPC counts the call on its connection's session: the stream's context
// derives from the connection's.
func (t *sessionTable) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if s, _ := ctx.Value(sessionKey{}).(*session); s != nil {
		s.calls.Add(1)
		s.last.Store(time.Now().UnixNano())
	}
	return ctx
}

func (t *sessionTable) HandleRPC(context.Context, stats.RPCStats) {}

// wrote records that the caller of ctx wrote module.
func wrote(ctx context.Context, module string) {
	if s, _ := ctx.Value(sessionKey{}).(*session); s != nil {
		s.mu.Lock()
		s.modules[module] = true
		s.mu.Unlock()
	}
}

func (s *session) snapshot() Session {
	s.mu.Lock()
	mods := slices.Sorted(maps.Keys(s.modules))
	s.mu.Unlock()
	return Session{
		UID: s.cred.uid, GID: s.cred.gid, PID: s.cred.pid, Remote: s.remote,
		Since: s.since, LastActivity: time.Unix(0, s.last.Load()), Calls: s.calls.Load(), Modules: mods,
	}
}

// Sessions returns the live sessions but except (nil: all), oldest first.
func (t *sessionTable) Sessions(except *session) []Session {
	t.mu.Lock()
	all := slices.Collect(maps.Keys(t.live))
	t.mu.Unlock()
	out := make([]Session, 0, len(all))
	for _, s := range all {
		if s != except {
			out = append(out, s.snapshot())
		}
	}
	slices.SortFunc(out, func(a, b Session) int { return a.Since.Compare(b.Since) })
	return out
}
