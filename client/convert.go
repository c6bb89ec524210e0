package client

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/entry"
)

// This file is the one place where the client converts between the API's
// proto messages and its own types.

func toProtoEntries(es []Entry) []*flowstatev1.Entry {
	out := make([]*flowstatev1.Entry, len(es))
	for i, e := range es {
		pe := &flowstatev1.Entry{Kind: flowstatev1.EntryKind(e.Kind)}
		if e.OpenFlow != nil {
			pe.Body = &flowstatev1.Entry_Openflow{Openflow: e.OpenFlow}
		} else {
			pe.Body = &flowstatev1.Entry_Text{Text: e.Text}
		}
		out[i] = pe
	}
	return out
}

func fromStored(se *flowstatev1.StoredEntry) StoredEntry {
	return StoredEntry{
		Bridge: se.GetBridge(), Module: se.GetModule(), Kind: entry.Kind(se.GetKind()),
		Text: se.GetText(), OpenFlow: se.GetOpenflow(),
	}
}

// fromTime maps an unset timestamp to the zero time.
func fromTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func fromStatus(p *flowstatev1.StatusResponse) *Status {
	g, gd := p.GetGate(), p.GetGuard()
	st := &Status{
		BootID: p.GetBootId(), ColdStart: p.GetColdStart(),
		FlowRestoreWait: p.GetFlowRestoreWait(), OVSDBConnected: p.GetOvsdbConnected(),
		VswitchdAcknowledged: p.GetVswitchdAcknowledged(),
		Gate: Gate{Open: g.GetOpen(), Reason: g.GetReason(), TimedOut: g.GetTimedOut(),
			WaitingFor: g.GetWaitingFor(), Deadline: fromTime(g.GetDeadline())},
		Guard: Guard{Mode: gd.GetMode(), Running: gd.GetRunning(), Grace: gd.GetGrace().AsDuration(), Lease: gd.GetLease(),
			Proven: gd.GetProven(), UnprovenField: gd.GetUnprovenField(), Reason: gd.GetReason(), PID: int(gd.GetPid()),
			GuardGrace: gd.GetGuardGrace().AsDuration(), GuardOVSDB: gd.GetGuardOvsdb(), OVSDB: gd.GetOvsdb(),
			LastRoundTrip: fromTime(gd.GetLastRoundTrip())},
		Wedged:      p.GetWedged(),
		LastRelease: fromTime(p.GetLastRelease()),
		OwnedCookie: entry.CookieSpace{Value: p.GetOwnedCookieValue(), Mask: p.GetOwnedCookieMask()},
		Bridges:     fromBridges(p.GetBridges()),
	}
	for _, m := range p.GetModules() {
		st.Modules = append(st.Modules, ModuleStatus{
			Bridge: m.GetBridge(), Name: m.GetName(),
			Flows: int(m.GetFlows()), Groups: int(m.GetGroups()), Meters: int(m.GetMeters()),
			Required: m.GetRequired(), Ready: m.GetReady(),
		})
	}
	st.QuarantinedTotal = int(p.GetQuarantinedTotal())
	for _, q := range p.GetQuarantined() {
		st.Quarantined = append(st.Quarantined, QuarantinedEntry{
			Entry: fromStored(q.GetEntry()), Error: q.GetError(), Since: fromTime(q.GetSince()),
		})
	}
	for _, ss := range p.GetSessions() {
		st.Sessions = append(st.Sessions, Session{
			UID: ss.GetUid(), GID: ss.GetGid(), PID: ss.GetPid(), Remote: ss.GetRemote(), Modules: ss.GetModules(),
			Since: fromTime(ss.GetSince()), LastActivity: fromTime(ss.GetLastActivity()), Calls: ss.GetCalls(),
		})
	}
	for _, px := range p.GetProxies() {
		st.Proxies = append(st.Proxies, ProxyStatus{
			Bridge: px.GetBridge(), Module: px.GetModule(), Socket: px.GetSocket(), TCPListen: px.GetTcpListen(),
			Connections: int(px.GetConnections()), RecordedMessages: px.GetRecordedMessages(),
			LastInstall: fromTime(px.GetLastInstall()), LastError: px.GetLastError(), LastErrorTime: fromTime(px.GetLastErrorTime()),
		})
	}
	return st
}

func fromBridges(ps []*flowstatev1.BridgeStatus) []BridgeStatus {
	out := make([]BridgeStatus, 0, len(ps))
	for _, b := range ps {
		bs := BridgeStatus{
			Name: b.GetName(), Connected: b.GetConnected(), Converged: b.GetConverged(),
			Since: fromTime(b.GetSince()), Reason: b.GetReason(), Excused: b.GetExcused(),
			DriftFound: int(b.GetDriftFound()), LastDrift: fromTime(b.GetLastDrift()),
			LeftAlone: int(b.GetLeftAlone()), LeftAloneAll: b.GetLeftAloneAll(),
			Flows: int(b.GetFlows()), Groups: int(b.GetGroups()), Meters: int(b.GetMeters()),
		}
		if r := b.GetLastReplay(); r != nil {
			bs.LastReplay = Replay{
				FinishedAt: fromTime(r.GetFinishedAt()), Duration: r.GetDuration().AsDuration(),
				Entries: int(r.GetEntries()), Messages: int(r.GetMessages()), Bytes: int(r.GetBytes()),
				Error: r.GetError(),
			}
		}
		out = append(out, bs)
	}
	return out
}

var changeOps = map[flowstatev1.Change_Op]ChangeOp{
	flowstatev1.Change_OP_ADD:    ChangeAdd,
	flowstatev1.Change_OP_MODIFY: ChangeModify,
	flowstatev1.Change_OP_DELETE: ChangeDelete,
}

func fromChanges(ps []*flowstatev1.Change) []Change {
	out := make([]Change, 0, len(ps))
	for _, c := range ps {
		out = append(out, Change{
			Op: changeOps[c.GetOp()], Kind: entry.Kind(c.GetKind()),
			Desired: c.GetDesired(), Actual: c.GetActual(), Module: c.GetModule(),
		})
	}
	return out
}

// fromEvent relies on EventType mirroring the enum's numbering
// (TestEventTypeMirrorsAPI); a value beyond what this client knows is
// EventUnknown.
func fromEvent(p *flowstatev1.Event) Event {
	t := EventType(p.GetEventType())
	if t < 0 || int(t) >= len(eventTypeNames) {
		t = EventUnknown
	}
	return Event{
		StreamID: p.GetStreamId(), Revision: p.GetRevision(), Time: fromTime(p.GetTime()),
		Type: t, TypeName: p.GetType(),
		Bridge: p.GetBridge(), Module: p.GetModule(), Message: p.GetMessage(), Attrs: p.GetAttrs(),
	}
}
