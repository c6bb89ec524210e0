package canon

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
)

// insertMod is the INSERT_BUCKET of the buckets of group text (its type
// as the message's) at command_bucket_id which.
func insertMod(t *testing.T, text string, which uint32) []byte {
	t.Helper()
	m := entry.WithCommand(mustParse(t, entry.KindGroup, text), groupCmdInsertBucket)
	binary.BigEndian.PutUint32(m[20:], which)
	return m
}

// TestInsertBuckets: InsertBuckets puts buckets where vswitchd's
// copy_buckets_for_insert_bucket puts them, keeps the group's type, and
// gives the buckets the default weight of the type they were sent with
// (ofmods' TestApplyAsTheSwitch holds the same to a real vswitchd).
func TestInsertBuckets(t *testing.T) {
	all := mustParse(t, entry.KindGroup, "group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2")
	sel := mustParse(t, entry.KindGroup, "group_id=2,type=select,bucket=bucket_id:0,weight:100,actions=output:3,bucket=bucket_id:1,weight:50,actions=output:4")
	for _, c := range []struct {
		name          string
		group, insert []byte
		want          string
		err           error
	}{
		{"first", all, insertMod(t, "group_id=1,type=all,bucket=bucket_id:5,actions=output:5", entry.BucketFirst),
			"group_id=1,type=all,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2", nil},
		{"last", all, insertMod(t, "group_id=1,type=all,bucket=bucket_id:5,actions=output:5", entry.BucketLast),
			"group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2,bucket=bucket_id:5,actions=output:5", nil},
		{"after bucket 0", all, insertMod(t, "group_id=1,type=all,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6", 0),
			"group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:5,actions=output:5,bucket=bucket_id:6,actions=output:6,bucket=bucket_id:1,actions=output:2", nil},
		{"after the last bucket", all, insertMod(t, "group_id=1,type=all,bucket=bucket_id:5,actions=output:5", 1),
			"group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2,bucket=bucket_id:5,actions=output:5", nil},
		{"sent as all into select: weight 0", sel, insertMod(t, "group_id=2,type=all,bucket=bucket_id:5,actions=output:5", entry.BucketLast),
			"group_id=2,type=select,bucket=bucket_id:0,weight:100,actions=output:3,bucket=bucket_id:1,weight:50,actions=output:4,bucket=bucket_id:5,weight:0,actions=output:5", nil},
		{"sent as select without a weight: weight 1", sel, func() []byte {
			m := insertMod(t, "group_id=2,type=all,bucket=bucket_id:5,actions=output:5", 0)
			m[10] = groupTypeSelect
			return m
		}(),
			"group_id=2,type=select,bucket=bucket_id:0,weight:100,actions=output:3,bucket=bucket_id:5,weight:1,actions=output:5,bucket=bucket_id:1,weight:50,actions=output:4", nil},
		{"sent as select into all: no weight", all, insertMod(t, "group_id=1,type=select,bucket=bucket_id:5,weight:7,actions=output:5", entry.BucketLast),
			"group_id=1,type=all,bucket=bucket_id:0,actions=output:1,bucket=bucket_id:1,actions=output:2,bucket=bucket_id:5,actions=output:5", nil},
		{"after an unknown bucket", all, insertMod(t, "group_id=1,type=all,bucket=bucket_id:5,actions=output:5", 7), "", ErrUnknownBucket},
		{"a bucket id the group holds", all, insertMod(t, "group_id=1,type=all,bucket=bucket_id:1,actions=output:5", entry.BucketLast), "", ErrBucketExists},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := InsertBuckets(c.group, c.insert)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("InsertBuckets: %v, want %v", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, wantID := mustParse(t, entry.KindGroup, c.want), []byte(nil)
			if _, wantID, err = entry.Identify(entry.KindGroup, want); err != nil {
				t.Fatal(err)
			}
			got, _ := Format(entry.KindGroup, e.Payload)
			if string(e.Payload) != string(want) || string(e.ID) != string(wantID) || e.Kind != entry.KindGroup {
				t.Fatalf("InsertBuckets = %s\n  %x\nwant %s\n  %x", got, e.Payload, c.want, want)
			}
		})
	}
	// Group properties belong to the group, not to an INSERT_BUCKET.
	withProps := mustParse(t, entry.KindGroup, "group_id=2,type=select,selection_method=hash,fields=ip_src,bucket=bucket_id:5,actions=output:5")
	if _, err := InsertBuckets(sel, entry.WithCommand(withProps, groupCmdInsertBucket)); err == nil {
		t.Error("InsertBuckets took an INSERT_BUCKET with group properties")
	}
}
