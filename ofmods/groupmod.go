// GROUP_MOD and METER_MOD on the overlay: add, modify and delete of the
// entries keyed by a 32-bit group or meter id.

package ofmods

import (
	"errors"
	"fmt"

	"antrea.io/libOpenflow/openflow15"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/ofctl"
)

// idMod is a GROUP_MOD or METER_MOD: the kind's errors and numbers.
type idMod struct {
	kind                                 entry.Kind
	failed                               uint16 // the error type
	exists, unknown, eperm               uint16 // its codes
	add, modify, delete, addOrMod, every uint32
}

var (
	groupMods = idMod{
		kind: entry.KindGroup, failed: openflow15.ET_GROUP_MOD_FAILED,
		exists: openflow15.GMFC_GROUP_EXISTS, unknown: openflow15.GMFC_UNKNOWN_GROUP, eperm: openflow15.GMFC_EPERM,
		add: groupAdd, modify: groupModify, delete: groupDelete, addOrMod: groupAddOrMod, every: openflow15.OFPG_ALL,
	}
	meterMods = idMod{
		kind: entry.KindMeter, failed: openflow15.ET_METER_MOD_FAILED,
		exists: openflow15.MMFC_METER_EXISTS, unknown: openflow15.MMFC_UNKNOWN_METER,
		add: meterAdd, modify: meterModify, delete: meterDelete, addOrMod: 1 << 31, every: openflow15.M_ALL,
	}
)

// refuseOwned refuses a change to another module's group or meter; a meter
// mod has no EPERM of its own, so it gets the request's.
func (k idMod) refuseOwned(i int, owner string) *Refusal {
	if k.eperm == 0 {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_EPERM, errOwned(k.kind, owner))
	}
	return refuse(i, k.failed, k.eperm, errOwned(k.kind, owner))
}

func (o *overlay) groupMod(i int, m []byte) error {
	if len(m) < groupModMin {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN, fmt.Errorf("GROUP_MOD of %d bytes", len(m)))
	}
	cmd := entry.ModCommand(m)
	if groupCommandKnown(cmd) {
		if err := checkGroupMod(i, m); err != nil {
			return err
		}
	}
	switch cmd {
	case groupInsert, groupRemove:
		s, owner, err := o.lookup(entry.KindGroup, entry.ModID(m))
		switch {
		case err != nil:
			return err
		case owner != "" && owner != o.module:
			return groupMods.refuseOwned(i, owner)
		case s == nil || !s.present:
			return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_GROUP, errors.New("no such group"))
		}
		var e entry.Entry
		if cmd == groupInsert {
			e, err = canon.InsertBuckets(s.e.Payload, m)
		} else {
			gm, _ := entry.ReadGroupMod(m) // checkGroupMod checked its bucket array
			e, err = canon.RemoveBuckets(s.e.Payload, gm.CommandBucket)
		}
		switch {
		case errors.Is(err, canon.ErrUnknownBucket):
			return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_UNKNOWN_BUCKET, err)
		case errors.Is(err, canon.ErrBucketExists):
			return refuse(i, openflow15.ET_GROUP_MOD_FAILED, openflow15.GMFC_BUCKET_EXISTS, err)
		case err != nil:
			return askSwitch(i, err)
		}
		o.set(i, s, e)
		return nil
	}
	return o.idMod(i, m, groupMods)
}

func (o *overlay) meterMod(i int, m []byte) error {
	if len(m) < modMin {
		return refuse(i, openflow15.ET_BAD_REQUEST, openflow15.BRC_BAD_LEN, fmt.Errorf("METER_MOD of %d bytes", len(m)))
	}
	return o.idMod(i, m, meterMods)
}

// idMod applies a GROUP_MOD or METER_MOD add, modify or delete.
func (o *overlay) idMod(i int, m []byte, k idMod) error {
	cmd, id, n := uint32(entry.ModCommand(m)), entry.ModID(m), modID(k.kind, m)
	var e entry.Entry
	switch cmd {
	case k.delete:
		if n == k.every {
			return o.each(k.kind, func(s *slot) error { return o.remove(i, s) })
		}
	case k.add, k.modify, k.addOrMod:
		// vswitchd decodes the message before it checks the id and looks
		// at its groups or meters. A group id past OFPG_MAX is none it
		// holds: a modify finds no group, an add refuses the id
		// (init_group).
		if k.kind == entry.KindGroup && n > openflow15.OFPG_MAX {
			if cmd == k.modify {
				return refuse(i, k.failed, k.unknown, fmt.Errorf("no %s %#x", k.kind, n))
			}
			return refuse(i, k.failed, openflow15.GMFC_INVALID_GROUP, fmt.Errorf("%s id %#x is reserved", k.kind, n))
		}
		var err error
		if e, err = canon.DecodeEntry(k.kind, entry.WithCommand(m, uint16(k.add))); err != nil {
			return askSwitch(i, err)
		}
		if k.kind == entry.KindMeter {
			if err := ofctl.CheckMeterID(n); err != nil {
				return refuse(i, openflow15.ET_METER_MOD_FAILED, openflow15.MMFC_INVALID_METER, err)
			}
		}
	default:
		return askSwitch(i, fmt.Errorf("%s command %d", k.kind, cmd))
	}
	s, owner, err := o.lookup(k.kind, id)
	if err != nil {
		return err
	}
	if owner != "" && owner != o.module {
		return k.refuseOwned(i, owner)
	}
	present := s != nil && s.present
	switch cmd {
	case k.delete:
		if present {
			return o.remove(i, s)
		}
		return nil
	case k.add:
		if present {
			return refuse(i, k.failed, k.exists, fmt.Errorf("%s %d exists", k.kind, n))
		}
	case k.modify:
		if !present {
			return refuse(i, k.failed, k.unknown, fmt.Errorf("no %s %d", k.kind, n))
		}
	}
	o.set(i, s, e)
	return nil
}
