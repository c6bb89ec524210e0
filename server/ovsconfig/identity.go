package ovsconfig

import (
	"context"
	"fmt"

	"github.com/ovn-org/libovsdb/ovsdb"
)

// Identity makes one round trip to ovsdb-server and returns the _uuid of its
// Open_vSwitch row. The uuid names the database, not the address it is
// reached at: two processes that report the same one write the same flag,
// and a database created anew (or another sandbox's at a reused path) gets
// another. It is read from the server, not only from the cache, so a
// successful call also proves that the server answers now.
func (c *Client) Identity(ctx context.Context) (string, error) {
	ovs, err := c.current()
	if err != nil {
		return "", err
	}
	row, err := readOVSRow(ovs)
	if err != nil {
		return "", err
	}
	// A select rather than an echo: libovsdb's Echo reads its reply after a
	// timed-out call while the reader may still write it (a data race); a
	// failed Transact returns without touching its reply.
	ops := []ovsdb.Operation{{
		Op:      ovsdb.OperationSelect,
		Table:   tableOpenvSwitch,
		Where:   []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: row.UUID})},
		Columns: []string{"_uuid"},
	}}
	results, err := c.transact(ctx, ovs, ops)
	if err != nil {
		return "", fmt.Errorf("ovsconfig: identity: %w", err)
	}
	if len(results[0].Rows) != 1 {
		// The cache still names a row the server no longer has: the
		// database was replaced under the connection.
		return "", fmt.Errorf("ovsconfig: identity: the Open_vSwitch row %s is gone from the server", row.UUID)
	}
	return row.UUID, nil
}
