package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

func groupOrMeter(kind entry.Kind, id uint32) entry.Entry {
	return entry.Entry{Kind: kind, ID: entry.Ref{ID: id}.Key(), Payload: []byte(fmt.Sprintf("%s %d", kind, id))}
}

// TestUsedGroupOrMeterCannotGo: a group or meter that declared flows use (of
// any module) can be neither deleted nor dropped by a Sync, unless the same
// request removes or changes those flows; the refusal names the users.
func TestUsedGroupOrMeterCannotGo(t *testing.T) {
	for _, kind := range []entry.Kind{entry.KindGroup, entry.KindMeter} {
		t.Run(kind.String(), func(t *testing.T) {
			s := openTest(t)
			lb := groupOrMeter(kind, 5)
			if err := s.Entries().Put("br0", "lb", []entry.Entry{lb, groupOrMeter(kind, 6)}, nil); err != nil {
				t.Fatal(err)
			}
			pol := withRef(flow("policy", 0, 1, "p"), kind, 5)
			pods := []entry.Entry{withRef(flow("pod", 0, 2, "a"), kind, 5), withRef(flow("pod", 0, 3, "b"), kind, 5)}
			if err := s.Entries().Put("br0", "policy", []entry.Entry{pol}, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Entries().Put("br0", "pod", pods, nil); err != nil {
				t.Fatal(err)
			}
			wantUsed := func(what string, err error, index int) {
				t.Helper()
				var iu *InUseError
				if !errors.Is(err, errdefs.ErrFailedPrecondition) || !errors.As(err, &iu) {
					t.Fatalf("%s: %v, want FAILED_PRECONDITION in use", what, err)
				}
				want := fmt.Sprintf("%s 5 is used by 3 flows of modules pod, policy: first: table=0,priority=", kind)
				if !strings.Contains(err.Error(), want) || strings.Count(err.Error(), "failed precondition") != 1 {
					t.Fatalf("%s: %q, want it to contain %q and its kind once", what, err, want)
				}
				var ee *errdefs.EntryError
				if index >= 0 && (!errors.As(err, &ee) || ee.Index != index) {
					t.Fatalf("%s: %v, want entry %d named", what, err, index)
				}
			}
			key := entry.Entry{Kind: kind, ID: lb.ID}
			wantUsed("delete", s.Entries().Delete("br0", "lb", []entry.Entry{groupOrMeter(kind, 6), key}, nil), 1)
			wantUsed("sync without it", s.Entries().Sync("br0", "lb", []entry.Entry{groupOrMeter(kind, 6)}, nil), -1)
			if got := list(t, s, Filter{Module: "lb"}); len(got) != 2 {
				t.Fatalf("a refused request removed entries: %d left", len(got))
			}
			// A Sync that keeps it, with another content, is fine.
			changed := lb
			changed.Payload = []byte("changed")
			if err := s.Entries().Sync("br0", "lb", []entry.Entry{changed}, nil); err != nil {
				t.Fatal(err)
			}
			// The users go away one by one: a flow changed to use nothing,
			// a flow deleted, a module synced empty but for one flow.
			if err := s.Entries().Put("br0", "policy", []entry.Entry{flow("policy", 0, 1, "p")}, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Entries().Delete("br0", "pod", []entry.Entry{{Kind: entry.KindFlow, ID: pods[0].ID}}, nil); err != nil {
				t.Fatal(err)
			}
			err := s.Entries().Delete("br0", "lb", []entry.Entry{key}, nil)
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "used by 1 flow of module pod") {
				t.Fatalf("delete with one user left: %v", err)
			}
			if err := s.Entries().Sync("br0", "pod", []entry.Entry{flow("pod", 9, 9, "z")}, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Entries().Delete("br0", "lb", []entry.Entry{key}, nil); err != nil {
				t.Fatalf("delete of an unused %s: %v", kind, err)
			}
		})
	}
}

// TestRemovedWithItsUsers: a request that removes a group and the flows that
// use it together is accepted, whatever the order of its entries.
func TestRemovedWithItsUsers(t *testing.T) {
	s := openTest(t)
	g, m := groupOrMeter(entry.KindGroup, 1), groupOrMeter(entry.KindMeter, 2)
	f := flow("pod", 0, 1, "f")
	f.Payload = flowModUsing(f.ID, entry.Ref{Kind: entry.KindGroup, ID: 1}, entry.Ref{Kind: entry.KindMeter, ID: 2})
	if err := s.Entries().Put("br0", "pod", []entry.Entry{f, g, m}, nil); err != nil {
		t.Fatal(err)
	}
	keys := []entry.Entry{{Kind: entry.KindGroup, ID: g.ID}, {Kind: entry.KindMeter, ID: m.ID}, {Kind: entry.KindFlow, ID: f.ID}}
	if err := s.Entries().Delete("br0", "pod", keys, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Entries().Put("br0", "pod", []entry.Entry{f, g, m}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Entries().Sync("br0", "pod", []entry.Entry{flow("pod", 1, 1, "other")}, nil); err != nil {
		t.Fatal(err)
	}
	// The index holds nothing of the removed flows.
	if err := s.db.View(func(tx *bolt.Tx) error {
		rb := tx.Bucket(bucketBridges).Bucket([]byte("br0")).Bucket(bucketRefs)
		if k, _ := rb.Cursor().First(); k != nil {
			return fmt.Errorf("refs index keeps %x", k)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestUsedInWrite: Writer.Used sees the flows of any module that use a
// group or meter as the transaction left them so far, so a caller can
// leave out what a Delete would refuse.
func TestUsedInWrite(t *testing.T) {
	s := openTest(t)
	g := groupOrMeter(entry.KindGroup, 5)
	if err := s.Entries().Put("br0", "lb", []entry.Entry{g, groupOrMeter(entry.KindMeter, 5)}, nil); err != nil {
		t.Fatal(err)
	}
	f := withRef(flow("pod", 0, 1, "a"), entry.KindGroup, 5)
	if err := s.Entries().Put("br0", "pod", []entry.Entry{f}, nil); err != nil {
		t.Fatal(err)
	}
	err := s.Update(func(w *Writer) error {
		switch {
		case !w.Used("br0", entry.KindGroup, g.ID):
			return errors.New("group 5, used by pod's flow, is not used")
		case w.Used("br0", entry.KindMeter, g.ID):
			return errors.New("meter 5, used by no flow, is used")
		case w.Used("br1", entry.KindGroup, g.ID):
			return errors.New("group 5 is used on a bridge the store does not hold")
		}
		if _, err := w.Delete("br0", "pod", []entry.Entry{{Kind: entry.KindFlow, ID: f.ID}}); err != nil {
			return err
		}
		if w.Used("br0", entry.KindGroup, g.ID) {
			return errors.New("group 5 is used after the transaction deleted its only user")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateRefs opens a schema 1 store (no refs index): the migration
// indexes its flows, so a used group cannot be deleted.
func TestMigrateRefs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flowstate.db")
	f := withRef(flow("pod", 0, 1, "f"), entry.KindGroup, 3)
	g := groupOrMeter(entry.KindGroup, 3)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		if err := meta.Put(keySchema, binary.BigEndian.AppendUint32(nil, 1)); err != nil {
			return err
		}
		root, _ := tx.CreateBucket(bucketBridges)
		br, _ := root.CreateBucket([]byte("br0"))
		for _, e := range []entry.Entry{f, g} {
			kb, _ := br.CreateBucketIfNotExists(kindBuckets[e.Kind])
			if err := kb.Put(e.ID, encodeRecordV1("pod", e.Payload)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.db.View(func(tx *bolt.Tx) error {
		if v := binary.BigEndian.Uint32(tx.Bucket(bucketMeta).Get(keySchema)); v != SchemaVersion {
			return fmt.Errorf("schema version %d after migration", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err = s.Entries().Delete("br0", "pod", []entry.Entry{{Kind: entry.KindGroup, ID: g.ID}}, nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "group 3 is used by 1 flow") {
		t.Fatalf("delete of a used group after migration: %v", err)
	}
}
