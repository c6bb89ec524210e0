package ovsconfig

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ovn-org/libovsdb/ovsdb"
)

// TestProveWritable: the write proof is accepted by the node's database and
// changes nothing in it (the row's _version, next_cfg and external_ids stay),
// while a read-only replica of it (ovsdb-server --sync-from), which Identity
// cannot tell from the database itself, refuses it with OVSDB's own words.
func TestProveWritable(t *testing.T) {
	ctx := testContext(t)
	s := startSandbox(ctx, t)
	c := dial(ctx, t, s.DBAddr(), Options{})
	// _version changes with every committed change of the row.
	row := func() string {
		ovs, err := c.current()
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.transact(ctx, ovs, []ovsdb.Operation{{Op: ovsdb.OperationSelect, Table: tableOpenvSwitch,
			Where:   []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionExcludes, ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"})},
			Columns: []string{"_version", "next_cfg", "external_ids"}}})
		if err != nil || len(res[0].Rows) != 1 {
			t.Fatalf("select the Open_vSwitch row: %v %v", res, err)
		}
		return fmt.Sprint(res[0].Rows[0])
	}
	before := row()
	id, err := c.ProveWritable(ctx)
	if err != nil {
		t.Fatalf("write proof on the node's database: %v", err)
	}
	if want := vsctl(ctx, t, s, "get", "Open_vSwitch", ".", "_uuid"); id != want {
		t.Fatalf("write proof names %q, the row is %q", id, want)
	}
	if after := row(); after != before {
		t.Fatalf("the write proof changed the Open_vSwitch row:\nbefore %s\nafter  %s", before, after)
	}

	r, err := s.StartReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	rc := dial(ctx, t, r.DBAddr(), Options{})
	if rid, err := rc.Identity(ctx); err != nil || rid != id {
		t.Fatalf("replica identity %q, %v: want the database's %q", rid, err, id)
	}
	_, err = rc.ProveWritable(ctx)
	if !errors.Is(err, ErrWriteRefused) || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("write proof on a read-only replica: %v, want ErrWriteRefused with OVSDB's \"not allowed\"", err)
	}
	t.Logf("replica: %v", err)
}
