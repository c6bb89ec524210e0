package ovsconfig

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
)

// state returns a copy of the cached Open_vSwitch row.
func (c *Client) state() (ovsRow, error) {
	ovs, err := c.current()
	if err != nil {
		return ovsRow{}, err
	}
	return readOVSRow(ovs)
}

// FlowRestoreWait reports other_config:flow-restore-wait as stored in OVSDB
// (from the cache). It is true only when the value is "true", compared
// without regard to case, as ovs-vswitchd reads it.
func (c *Client) FlowRestoreWait() (bool, error) {
	row, err := c.state()
	if err != nil {
		return false, err
	}
	return flagValue(row.OtherConfig[keyFlowRestoreWait]), nil
}

// flagValue interprets an other_config boolean the way vswitchd's
// smap_get_bool(..., false) does.
func flagValue(v string) bool {
	return strings.EqualFold(v, "true")
}

// Config returns next_cfg and cur_cfg from the cache. cur_cfg == next_cfg
// means vswitchd has applied the latest configuration (or that it last did
// so before it stopped: the columns say nothing about whether it runs now).
func (c *Client) Config() (nextCfg, curCfg int, err error) {
	row, err := c.state()
	if err != nil {
		return 0, 0, err
	}
	return row.NextCfg, row.CurCfg, nil
}

// SetFlowRestoreWait sets other_config:flow-restore-wait to "true" (on) or
// removes the key (off; vswitchd treats a missing key as false) and
// increments next_cfg, in one mutate, so vswitchd rereads the database. The
// new next_cfg is read back in the same transaction. With wait, it then
// blocks until cur_cfg has reached that value, i.e. vswitchd has applied the
// change; ctx bounds the transaction and the wait, and a wait cut short wraps
// ErrNotAcknowledged and ctx's error. Fails at once with ErrNotConnected
// while disconnected.
//
// The flag only matters to vswitchd at its start: setting it on a running
// vswitchd is acknowledged but changes nothing until the next restart, while
// clearing it releases a vswitchd that was started with it.
func (c *Client) SetFlowRestoreWait(ctx context.Context, on bool, wait bool) error {
	what := "clear"
	if on {
		what = "set"
	}
	next, err := c.mutateFlag(ctx, on)
	if err != nil {
		return fmt.Errorf("ovsconfig: %s %s: %w", what, keyFlowRestoreWait, err)
	}
	c.log.Debug("ovsconfig: flow-restore-wait written", "on", on, "next_cfg", next)
	if !wait {
		return nil
	}
	if err := c.waitCurCfg(ctx, next); err != nil {
		return fmt.Errorf("ovsconfig: %s %s: %w", what, keyFlowRestoreWait, err)
	}
	return nil
}

// WaitConfigured blocks until cur_cfg has reached the next_cfg current at the
// call, i.e. vswitchd has applied every change made so far. A wait cut short
// by ctx wraps ErrNotAcknowledged.
func (c *Client) WaitConfigured(ctx context.Context) error {
	row, err := c.state()
	if err != nil {
		return fmt.Errorf("ovsconfig: wait for ovs-vswitchd: %w", err)
	}
	if err := c.waitCurCfg(ctx, row.NextCfg); err != nil {
		return fmt.Errorf("ovsconfig: wait for ovs-vswitchd: %w", err)
	}
	return nil
}

// mutateFlag runs the one transaction of SetFlowRestoreWait and returns the
// next_cfg it produced.
func (c *Client) mutateFlag(ctx context.Context, on bool) (int, error) {
	ovs, err := c.current()
	if err != nil {
		return 0, err
	}
	row, err := readOVSRow(ovs)
	if err != nil {
		return 0, err
	}
	m := &ovsRow{UUID: row.UUID}
	// Mutations apply in order: "insert" never overwrites an existing key,
	// so the old value is deleted first.
	mutations := []model.Mutation{
		{Field: &m.OtherConfig, Mutator: ovsdb.MutateOperationDelete, Value: []string{keyFlowRestoreWait}},
	}
	if on {
		mutations = append(mutations, model.Mutation{
			Field: &m.OtherConfig, Mutator: ovsdb.MutateOperationInsert,
			Value: map[string]string{keyFlowRestoreWait: "true"},
		})
	}
	mutations = append(mutations, model.Mutation{Field: &m.NextCfg, Mutator: ovsdb.MutateOperationAdd, Value: 1})
	ops, err := ovs.Where(m).Mutate(m, mutations...)
	if err != nil {
		return 0, fmt.Errorf("build mutate: %w", err)
	}
	if len(ops) != 1 || len(ops[0].Where) == 0 {
		// An empty Where would be dropped on the wire (omitempty) and the
		// server would answer with a syntax error; refuse it here.
		return 0, fmt.Errorf("build mutate: expected one operation on row %s, got %d", row.UUID, len(ops))
	}
	ops = append(ops, ovsdb.Operation{
		Op:      ovsdb.OperationSelect,
		Table:   tableOpenvSwitch,
		Where:   ops[0].Where,
		Columns: []string{colNextCfg},
	})
	results, err := c.transact(ctx, ovs, ops)
	if err != nil {
		return 0, err
	}
	if results[0].Count != 1 {
		return 0, fmt.Errorf("transact: mutate matched %d rows, want 1 (row %s)", results[0].Count, row.UUID)
	}
	if len(results[1].Rows) != 1 {
		return 0, fmt.Errorf("transact: select returned %d rows, want 1", len(results[1].Rows))
	}
	next, err := nextCfgFromRow(results[1].Rows[0])
	if err != nil {
		return 0, fmt.Errorf("transact: %w", err)
	}
	return next, nil
}

// maxExactInt is the largest magnitude a float64 holds exactly; OVSDB
// integers are 64-bit but arrive as JSON numbers decoded into float64.
const maxExactInt = 1 << 53

// nextCfgFromRow decodes next_cfg from a select result row.
func nextCfgFromRow(r ovsdb.Row) (int, error) {
	v, ok := r[colNextCfg]
	if !ok {
		return 0, fmt.Errorf("ovsconfig: select result has no %s column", colNextCfg)
	}
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > maxExactInt {
			return 0, fmt.Errorf("ovsconfig: %s = %v is not an OVSDB integer in range", colNextCfg, n)
		}
		return int(n), nil
	case int:
		return n, nil
	default:
		return 0, fmt.Errorf("ovsconfig: %s has type %T, want a number", colNextCfg, v)
	}
}

// waitCurCfg blocks until the cached cur_cfg is at least target. It keeps
// waiting across a reconnect (the fresh cache tells the outcome).
func (c *Client) waitCurCfg(ctx context.Context, target int) error {
	for {
		ch := c.Changed()
		row, err := c.state()
		switch {
		case err == nil && row.CurCfg >= target:
			return nil
		case errors.Is(err, ErrClosed):
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w: cur_cfg not seen reaching %d (%w): %w", ErrNotAcknowledged, target, err, ctx.Err())
			}
			return fmt.Errorf("%w: cur_cfg %d has not reached next_cfg %d: %w", ErrNotAcknowledged, row.CurCfg, target, ctx.Err())
		}
	}
}

// cache returns the monitor's cache of the live connection.
func (c *Client) cache() (*cache.TableCache, error) {
	ovs, err := c.current()
	if err != nil {
		return nil, err
	}
	tc := ovs.Cache()
	if tc == nil {
		return nil, ErrNotConnected
	}
	return tc, nil
}

// Bridges returns the cached Bridge rows, sorted by name.
func (c *Client) Bridges() ([]Bridge, error) {
	tc, err := c.cache()
	if err != nil {
		return nil, err
	}
	var out []Bridge
	if rc := tc.Table(tableBridge); rc != nil {
		for _, m := range rc.RowsShallow() {
			if b, ok := m.(*bridgeRow); ok {
				out = append(out, b.toBridge())
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// transact runs ops in one transaction bounded by RequestTimeout and returns
// the results once every operation succeeded.
func (c *Client) transact(ctx context.Context, ovs client.Client, ops []ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	tctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	results, err := ovs.Transact(tctx, ops...)
	if err != nil {
		if errors.Is(err, client.ErrNotConnected) {
			err = fmt.Errorf("%w: %w", ErrNotConnected, err)
		}
		return nil, fmt.Errorf("transact: %w", err)
	}
	// Transact reports only transport errors; per-operation errors are in
	// the results.
	if opErrs, err := ovsdb.CheckOperationResults(results, ops); err != nil {
		errs := []error{err}
		for _, e := range opErrs {
			errs = append(errs, e)
		}
		return nil, fmt.Errorf("transact: %w", errors.Join(errs...))
	}
	return results, nil
}

// TableLimits returns the tables of bridge name that OVSDB gives a flow limit
// (Flow_Table rows with flow_limit set), sorted by table id, from the cache.
// A bridge not in the cache has none.
func (c *Client) TableLimits(name string) ([]TableLimit, error) {
	tc, err := c.cache()
	if err != nil {
		return nil, err
	}
	rc, ft := tc.Table(tableBridge), tc.Table(tableFlowTable)
	if rc == nil || ft == nil {
		return nil, nil
	}
	var out []TableLimit
	for _, m := range rc.RowsShallow() {
		b, ok := m.(*bridgeRow)
		if !ok || b.Name != name {
			continue
		}
		for table, uuid := range b.FlowTables {
			r, ok := ft.Row(uuid).(*flowTableRow)
			if !ok || r.FlowLimit == nil || table < 0 || table > math.MaxUint8 {
				continue
			}
			out = append(out, TableLimit{
				Table:     uint8(table),
				FlowLimit: *r.FlowLimit,
				Evict:     r.OverflowPolicy != nil && *r.OverflowPolicy == "evict",
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Table < out[j].Table })
	return out, nil
}
