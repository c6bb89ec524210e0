package restore

import (
	"context"
	"time"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/ofproxy"
	"github.com/flowstate-io/flowstate/server/restore/flag"
	"github.com/flowstate-io/flowstate/server/restore/owner"
	"github.com/flowstate-io/flowstate/server/restore/vswitchd"
	"github.com/flowstate-io/flowstate/server/restore/write"
)

// What the server reaches of the rooms, one interface per concern, as
// etcdserver hands its gRPC services a RaftKV or a Lessor. The rooms'
// types also carry what only the coordinator wires (write.Writes.Adopt,
// owner.Owners.Learning and Claim, flag.Flag.Pin and Run), so the engine
// hands them on as these, never as the rooms' own types
// (server's TestServerHoldsNoRoom).
type (
	// Writes is the write path: the API's writes and the proxies'
	// Recorders (package write).
	Writes interface {
		// Put and Sync take d.Spool: the engine closes it.
		Put(ctx context.Context, bridge, module string, d write.Declared) (applied bool, err error)
		Sync(ctx context.Context, bridge, module string, d write.Declared, ready bool) (write.SyncResult, error)
		Delete(ctx context.Context, bridge, module string, keys []entry.Entry) (applied bool, n int, err error)
		// Recorder takes a proxied controller's changes as module's.
		Recorder(bridge, module string) (write.Recorder, error)
	}

	// Flag is flow-restore-wait as the operator arms and releases it, as
	// Status and the metrics report it, and as the guard's keeper tells it
	// of the guard (package flag).
	Flag interface {
		Arm(ctx context.Context) (wasSet bool, err error)
		Release(ctx context.Context) (wasSet bool, ack time.Duration, err error)
		State() flag.State
		GuardChanged()
	}

	// Owners is what the proxies tell of ownership: the guard's evidence of
	// a relayed controller (before Run), and the Kept record of what
	// unrecorded controllers installed (package owner).
	Owners interface {
		AdoptRelayed(bridge, module string, rel owner.Relayed) error
		Kept(bridge string) (ofproxy.Keeper, error)
	}
)

// Writes is the write path (package write).
func (e *Engine) Writes() Writes { return e.writes }

// Flag is the flow-restore-wait protocol (package flag).
func (e *Engine) Flag() Flag { return e.flag }

// Owners is what the proxies tell of ownership (package owner).
func (e *Engine) Owners() Owners { return e.owners }

// VswitchdInfo is what the engine knows of the running vswitchd's build.
func (e *Engine) VswitchdInfo() vswitchd.Info { return e.vswitchd.Info() }
