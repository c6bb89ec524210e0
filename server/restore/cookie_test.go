package restore

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/ofctl"
	"github.com/flowstate-io/flowstate/server/restore/owner"
	"github.com/flowstate-io/flowstate/server/restore/write"
	"github.com/flowstate-io/flowstate/store"
)

func TestStoreOutsideOwnedSpace(t *testing.T) {
	inside := flowEntry(t, "m", "table=0,priority=1,cookie=0x1000,actions=drop")
	outside := flowEntry(t, "m", "table=0,priority=2,cookie=0x2000,actions=drop")
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Update(func(w *store.Writer) error {
		_, err := w.Put("br-int", "m", []entry.Entry{inside, outside})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	gm, err := ofctl.ParseGroup("group_id=1,type=all")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := gm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	gp, gid, err := entry.Identify(entry.KindGroup, raw)
	if err != nil {
		t.Fatal(err)
	}
	group := entry.Entry{Kind: entry.KindGroup, ID: gid, Payload: gp, Module: "m"}
	space := entry.CookieSpace{Value: 0x1000, Mask: 0xf000}
	err = owner.CheckStoreOwned(st, []string{"br-int"}, space)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "outside the owned cookie space 0x1000/0xf000 (the first has cookie 0x2000)") {
		t.Fatalf("store with a flow outside the space: %v", err)
	}
	if err = owner.CheckStoreOwned(st, []string{"br-int"}, entry.CookieSpace{Value: 0, Mask: 0xc000}); err != nil {
		t.Fatalf("both flows inside: %v", err)
	}
	err = write.CheckOwned(space, []entry.Entry{inside, group, outside}, 0)
	var ee *errdefs.EntryError
	if !errors.As(err, &ee) || ee.Index != 2 || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("write with a flow outside the space: %v, want entries[2] refused", err)
	}
}
