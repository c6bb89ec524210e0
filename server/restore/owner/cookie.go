package owner

import (
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/errdefs"
	"github.com/flowstate-io/flowstate/store"
)

// Ownership by cookie (Config.OwnedCookie).
//
// On every managed bridge the engine manages the flows whose cookie lies in
// the owned space, and only those: a dump counts the others and leaves them
// out of every comparison (package replay), so replays, audits, diffs and
// status never see them, and a new store never counts them as flows it would
// delete (undeclaredEntries). A declared flow outside the space is refused
// (package write). After a vswitchd restart, the foreign flows come back from
// the bridge's mirror, like an unmanaged bridge's (package replay, foreign.go).
//
// Groups and meters have no cookie: with a space other than 0/0, those the
// switch holds and no module declared are someone else's and left alone
// (explicit adoption: declaring a group or meter takes it over); with 0/0
// the engine owns them all, as it owns every flow.

// errOutside stops the scan of CheckStoreOwned at the first flow outside.
var errOutside = errors.New("restore: outside the owned cookie space")

// CheckStoreOwned refuses to start with a store that holds flows outside the
// owned space (the space was narrowed): the engine would add them at every
// replay and find them missing at every audit, since it leaves the switch's
// flows outside the space alone.
func CheckStoreOwned(st *store.Store, bridges []string, space entry.CookieSpace) error {
	if space.All() {
		return nil
	}
	for _, br := range bridges {
		var first uint64
		err := st.Entries().ScanFlows(br, nil, func(rec store.Record) error {
			if c := entry.FlowCookie(rec.Payload); !space.Owns(c) {
				first = c
				return errOutside
			}
			return nil
		})
		if errors.Is(err, errOutside) {
			return fmt.Errorf("restore: the store holds flows of bridge %s outside the owned cookie space %s (the first has cookie 0x%x): start with a space that holds them, or delete them (flowctl del-flows) first: %w",
				br, space, first, errdefs.ErrFailedPrecondition)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
