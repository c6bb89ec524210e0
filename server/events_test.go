package server

import (
	"strings"
	"testing"

	flowstatev1 "github.com/flowstate-io/flowstate/api/flowstate/v1"
	"github.com/flowstate-io/flowstate/server/events"
)

// TestEventTypes: every event type has its enum value, named alike.
func TestEventTypes(t *testing.T) {
	if got, want := len(events.Types), len(flowstatev1.EventType_name)-1; got != want {
		t.Fatalf("%d event types, %d enum values", got, want)
	}
	for _, ty := range events.Types {
		e := eventTypes[ty]
		if want := "EVENT_TYPE_" + strings.ToUpper(string(ty)); e.String() != want {
			t.Errorf("%s maps to %s, want %s", ty, e, want)
		}
	}
}
