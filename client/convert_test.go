package client

import (
	"errors"
	"strings"
	"testing"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
)

// TestEventTypeMirrorsAPI: EventType has the API enum's numbering and names,
// and a value this client does not know converts to EventUnknown with its
// name kept.
func TestEventTypeMirrorsAPI(t *testing.T) {
	if len(flowstatev1.EventType_name) != len(eventTypeNames) {
		t.Fatalf("API has %d event types, the client %d", len(flowstatev1.EventType_name), len(eventTypeNames))
	}
	for v, name := range flowstatev1.EventType_name {
		want := strings.ToLower(strings.TrimPrefix(name, "EVENT_TYPE_"))
		if v == 0 {
			want = "unknown"
		}
		if got := EventType(v).String(); got != want {
			t.Errorf("%s: client says %q, want %q", name, got, want)
		}
		if ev := fromEvent(&flowstatev1.Event{EventType: flowstatev1.EventType(v)}); ev.Type != EventType(v) {
			t.Errorf("%s converts to %v", name, ev.Type)
		}
	}
	ev := fromEvent(&flowstatev1.Event{EventType: flowstatev1.EventType(len(eventTypeNames)), Type: "from_the_future"})
	if ev.Type != EventUnknown || ev.TypeName != "from_the_future" {
		t.Errorf("a newer type converts to %v %q", ev.Type, ev.TypeName)
	}
}

func TestChangeOpMirrorsAPI(t *testing.T) {
	for v, name := range flowstatev1.Change_Op_name {
		want := strings.ToLower(strings.TrimPrefix(name, "OP_"))
		if v == 0 {
			want = "unknown"
		}
		if got := fromChanges([]*flowstatev1.Change{{Op: flowstatev1.Change_Op(v)}})[0].Op.String(); got != want {
			t.Errorf("%s converts to %q, want %q", name, got, want)
		}
	}
}

// TestFollows: Watch accepts only the event right after its position, so a
// resume the server serves "from now" (revision 0) cannot skip events.
func TestFollows(t *testing.T) {
	at := Cursor{StreamID: "s1", Revision: 7}
	ev := func(stream string, rev uint64, typ EventType) Event {
		return Event{StreamID: stream, Revision: rev, Type: typ}
	}
	for _, tc := range []struct {
		name   string
		cur    Cursor
		ev     Event
		resync bool
	}{
		{"next revision", at, ev("s1", 8, EventModuleReady), false},
		{"heartbeat at the position", at, ev("s1", 7, EventHeartbeat), false},
		{"from now: anything", Cursor{}, ev("s2", 42, EventReplayFinished), false},
		{"gap", at, ev("s1", 9, EventModuleReady), true},
		{"heartbeat after missed events", at, ev("s1", 9, EventHeartbeat), true},
		{"another stream", at, ev("s2", 8, EventModuleReady), true},
		{"revision 0 resumed after a restart", Cursor{StreamID: "s1"}, ev("s2", 1, EventBridgeConnected), true},
		{"revision 0 resumed after events", Cursor{StreamID: "s1"}, ev("s1", 3, EventHeartbeat), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := follows(tc.cur, tc.ev)
			if got := errors.Is(err, ErrResync); got != tc.resync || (err != nil && !got) {
				t.Fatalf("follows(%+v, %+v) = %v, want resync %v", tc.cur, tc.ev, err, tc.resync)
			}
		})
	}
}
