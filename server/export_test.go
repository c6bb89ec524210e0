package server

import "github.com/flowstate-io/flowstate/server/restore"

// Mirrors is the state of the unmanaged bridges the engine mirrors (see
// restore.Engine.Mirrors); the API does not carry it yet.
func (d *Daemon) Mirrors() []restore.BridgeStatus { return d.mirrors.Mirrors() }
