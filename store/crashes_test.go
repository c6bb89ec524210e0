package store

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestCrashRecord: a crash record is kept per bridge across a reopen, and an
// empty one deletes it.
func TestCrashRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Crashes().Get("br-int"); err != nil || !r.Empty() {
		t.Fatalf("a new store's record %+v (%v), want empty", r, err)
	}
	want := CrashRecord{
		Deaths:   []time.Time{time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC)},
		Survived: []byte{1, 2, 3, 4, 5, 6, 7, 8},
		Dirty:    []byte{0x81},
		Suspects: []SuspectRange{{Lo: []byte{1, 2}, Bad: true, Died: 1}, {Lo: []byte{1, 3}, Hi: []byte{1, 9}}},
		Probe:    &SuspectRange{Lo: []byte{1, 2}, Hi: []byte{1, 2, 5}, Died: 3},
		Poisoned: []PoisonedEntry{{Key: []byte{1, 7}, Sum: 42, Module: "pod", Name: "priority=1 actions=drop"}},
		Since:    time.Date(2026, 12, 3, 13, 1, 0, 0, time.UTC),
	}
	if err := s.Crashes().Set("br-int", want); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Crashes().Get("br-int")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after a reopen %+v (%v), want %+v", got, err, want)
	}
	if r, err := s.Crashes().Get("br-ex"); err != nil || !r.Empty() {
		t.Fatalf("another bridge's record %+v (%v), want empty", r, err)
	}
	if err := s.Crashes().Set("br-int", CrashRecord{}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Crashes().Get("br-int"); err != nil || !r.Empty() {
		t.Fatalf("after an empty record %+v (%v), want empty", r, err)
	}
}

// TestCrashRecordWithoutDied: a record written before SuspectRange.Died
// existed reads as no probe having died on its ranges.
func TestCrashRecordWithoutDied(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := []byte(`{"suspects":[{"lo":"AQI=","bad":true}],"probe":{"lo":"AQI=","hi":"AQIF"}}`)
	if err := s.db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketCrashes)
		if err != nil {
			return err
		}
		return b.Put([]byte("br-int"), old)
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Crashes().Get("br-int")
	want := CrashRecord{Suspects: []SuspectRange{{Lo: []byte{1, 2}, Bad: true}}, Probe: &SuspectRange{Lo: []byte{1, 2}, Hi: []byte{1, 2, 5}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("an older record reads %+v (%v), want %+v", got, err, want)
	}
}
