package ovsconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
)

// SetBridgeExternalIDs sets keys of the external_ids column of bridge name,
// leaving the others, in one transaction. It does not wait for vswitchd,
// which does not read these keys.
func (c *Client) SetBridgeExternalIDs(ctx context.Context, name string, set map[string]string) error {
	if err := c.setBridgeExternalIDs(ctx, name, set); err != nil {
		return fmt.Errorf("ovsconfig: bridge %s external_ids: %w", name, err)
	}
	return nil
}

func (c *Client) setBridgeExternalIDs(ctx context.Context, name string, set map[string]string) error {
	ovs, err := c.current()
	if err != nil {
		return err
	}
	var uuid string
	bridges, err := c.Bridges()
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(bridges, func(b Bridge) bool { return b.Name == name }); i >= 0 {
		uuid = bridges[i].uuid
	}
	if uuid == "" {
		return errors.New("no such bridge in OVSDB")
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	b := &bridgeRow{UUID: uuid}
	// "insert" never overwrites a key, so the old values go first.
	ops, err := ovs.Where(b).Mutate(b,
		model.Mutation{Field: &b.ExternalIDs, Mutator: ovsdb.MutateOperationDelete, Value: keys},
		model.Mutation{Field: &b.ExternalIDs, Mutator: ovsdb.MutateOperationInsert, Value: set},
	)
	if err != nil {
		return fmt.Errorf("build mutate: %w", err)
	}
	if len(ops) != 1 || len(ops[0].Where) == 0 {
		return fmt.Errorf("build mutate: expected one operation on row %s, got %d", uuid, len(ops))
	}
	results, err := c.transact(ctx, ovs, ops)
	if err != nil {
		return err
	}
	if results[0].Count != 1 {
		return fmt.Errorf("transact: mutate matched %d rows, want 1", results[0].Count)
	}
	return nil
}
