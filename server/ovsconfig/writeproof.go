package ovsconfig

import (
	"context"
	"errors"
	"fmt"

	"github.com/ovn-org/libovsdb/ovsdb"
)

// ErrWriteRefused means ovsdb-server answered a write with an error: a
// read-only server (an active-backup pair's backup, ovsdb-server
// --sync-from), or one whose access control forbids the write. A client of
// such a server reads the right row but can change nothing in it.
var ErrWriteRefused = errors.New("ovsconfig: ovsdb-server refuses writes")

// keyWriteProof is the Open_vSwitch external_ids key ProveWritable deletes.
// Nothing sets it, so the delete never changes the row.
const keyWriteProof = "flowstate-guard-probe"

// ProveWritable makes one write transaction to ovsdb-server and returns the
// _uuid of its Open_vSwitch row, as Identity does. Where Identity shows
// that the server answers, this shows that it takes writes: a server that
// does not (ErrWriteRefused, with OVSDB's own words) could not clear
// flow-restore-wait either.
//
// The write is a mutate that deletes external_ids:flowstate-guard-probe, a
// key nothing sets, from the row. ovsdb-server checks it as any write (its
// read-only mode refuses every mutate, whatever it would change), then finds
// the row unchanged and drops it from the commit: no monitor is notified
// (vswitchd, ovn-controller), nothing reaches the disk, next_cfg stays. So it
// costs what a select does and may run at every heartbeat.
func (c *Client) ProveWritable(ctx context.Context) (string, error) {
	ovs, err := c.current()
	if err != nil {
		return "", err
	}
	row, err := readOVSRow(ovs)
	if err != nil {
		return "", err
	}
	ops := []ovsdb.Operation{{
		Op:        ovsdb.OperationMutate,
		Table:     tableOpenvSwitch,
		Where:     []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: row.UUID})},
		Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationDelete, ovsdb.OvsSet{GoSet: []any{keyWriteProof}})},
	}}
	results, err := c.transact(ctx, ovs, ops)
	if err != nil {
		if refusal := refusedBy(err); refusal != "" {
			return "", fmt.Errorf("%w: %s", ErrWriteRefused, refusal)
		}
		return "", fmt.Errorf("ovsconfig: write proof: %w", err)
	}
	if results[0].Count != 1 {
		// As in Identity: the cached row is gone from the server.
		return "", fmt.Errorf("ovsconfig: write proof: the Open_vSwitch row %s is gone from the server (mutate matched %d rows)", row.UUID, results[0].Count)
	}
	return row.UUID, nil
}

// refusedBy returns OVSDB's answer when err carries an operation error, i.e.
// the server answered the transaction and refused it (transact checks the
// results with ovsdb.CheckOperationResults), or "" for any other failure (no
// connection, a timeout), which says nothing about writes.
func refusedBy(err error) string {
	var oe ovsdb.OperationError
	if errors.As(err, &oe) {
		return oe.Error()
	}
	return ""
}
