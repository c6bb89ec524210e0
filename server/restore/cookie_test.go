package restore

import (
	"errors"
	"strings"
	"testing"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
)

func TestStoreOutsideOwnedSpace(t *testing.T) {
	inside, outside := flowEnt(t, 0, 1, 0, 0), flowEnt(t, 0, 2, 0, 0)
	inside.Payload[8+6] = 0x10 // cookie 0x1000
	outside.Payload[8+6] = 0x20
	fs := testScan(t, []entry.Entry{inside, outside}, nil, nil)
	space := entry.CookieSpace{Value: 0x1000, Mask: 0xf000}
	err := checkStoreOwned(fs.store, []string{"br-int"}, space)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "outside the owned cookie space 0x1000/0xf000 (the first has cookie 0x2000)") {
		t.Fatalf("store with a flow outside the space: %v", err)
	}
	if err := checkStoreOwned(fs.store, []string{"br-int"}, entry.CookieSpace{Value: 0, Mask: 0xc000}); err != nil {
		t.Fatalf("both flows inside: %v", err)
	}
	e := &Engine{cfg: Config{OwnedCookie: space}}
	err = e.checkOwned([]entry.Entry{inside, groupEnt(t, 1), outside})
	var ee *errdefs.EntryError
	if !errors.As(err, &ee) || ee.Index != 2 || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("write with a flow outside the space: %v, want entries[2] refused", err)
	}
}
