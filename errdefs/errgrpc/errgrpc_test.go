package errgrpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowstate-io/flowstate/errdefs"
)

func TestRoundTrip(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.code.String(), func(t *testing.T) {
			err := fmt.Errorf("store: put br0/pod: %w", k.kind)
			g := ToGRPC(err)
			if status.Code(g) != k.code {
				t.Fatalf("code %v, want %v", status.Code(g), k.code)
			}
			if n := ToNative(g); !errors.Is(n, k.kind) {
				t.Fatalf("native %v does not wrap %v", n, k.kind)
			}
		})
	}
}

func TestEntryIndexTravels(t *testing.T) {
	err := fmt.Errorf("put: %w", &errdefs.EntryError{Index: 7, Err: fmt.Errorf("bad: %w", errdefs.ErrInvalidArgument)})
	n := ToNative(ToGRPC(err))
	var ee *errdefs.EntryError
	if !errors.As(n, &ee) || ee.Index != 7 || !errors.Is(n, errdefs.ErrInvalidArgument) {
		t.Fatalf("native = %v", n)
	}
}

func TestUnknownAndNil(t *testing.T) {
	if ToGRPC(nil) != nil || ToNative(nil) != nil {
		t.Fatal("nil not kept")
	}
	if c := status.Code(ToGRPC(errors.New("boom"))); c != codes.Unknown {
		t.Fatalf("code %v", c)
	}
	if n := ToNative(status.Error(codes.DataLoss, "x")); errdefs.Kind(n) != nil || errors.Is(n, context.Canceled) {
		t.Fatalf("data loss mapped to a kind: %v", n)
	}
}

// TestKindStatedOnce: the client's error says its kind and entry once, as the
// server's message did.
func TestKindStatedOnce(t *testing.T) {
	err := fmt.Errorf("store: put br0/pod: %w", &errdefs.EntryError{Index: 3, Err: fmt.Errorf("nw_srcc: unknown field: %w", errdefs.ErrInvalidArgument)})
	got := ToNative(ToGRPC(err)).Error()
	if want := "entry 3: flowstated: store: put br0/pod: nw_srcc: unknown field: invalid argument"; got != want {
		t.Fatalf("native error %q, want %q", got, want)
	}
	if got := ToNative(status.Error(codes.Unavailable, "bridge br0 is not connected")).Error(); got != "flowstated: bridge br0 is not connected: unavailable" {
		t.Fatalf("native error without its kind in the message: %q", got)
	}
}
