package replay

import (
	"bytes"

	"github.com/flowstate-io/flowstate/canon"
	"github.com/flowstate-io/flowstate/entry"
	"github.com/flowstate-io/flowstate/server/restore/plan"
	"github.com/flowstate-io/flowstate/store"
)

// flowScan reads a bridge's desired flows against a switchState. The
// caller holds the bridge's lock, so the flows cannot change between scans:
// every scan of one plan makes the same decisions.
type flowScan struct {
	store  *store.Store
	bridge string
	sw     *switchState
	// skip holds the keys (key()) of entries the plan leaves out.
	skip map[string]bool
	// keepUndeclared leaves alone the groups and meters on the switch that
	// no module declared (a partial owned cookie space).
	keepUndeclared bool
	// forms are the switch's forms of declared payloads (canon.Forms): a
	// desired flow is compared and sent in its learned form.
	forms *canon.Forms
	// learn collects, while the bundle is written, the modified flows whose
	// form the switch may rewrite (canon.Opaque), to learn it after.
	learn []plan.Change
	k     []byte
	// actual holds the switch's version of the flows a diff shows changed
	// that the dump kept only hashes of (switchVersions).
	actual map[flowKey][]byte
}

// actualOf is the switch's version of a desired flow a diff shows changed,
// or nil.
func (fs *flowScan) actualOf(op plan.Op, id []byte) []byte {
	if op != plan.OpModify {
		return nil
	}
	k := fs.sw.key(id)
	if m, ok := fs.sw.kept[k]; ok {
		return m
	}
	return fs.actual[k]
}

// compared returns the groups and meters of the switch that the plan compares
// with the desired ones (others): all of them, or with keepUndeclared the
// declared ones.
func (fs *flowScan) compared(others []entry.Entry) []plan.ActualEntry {
	if !fs.keepUndeclared {
		return fs.sw.others
	}
	declared, _ := fs.byDeclared(others)
	return declared
}

// byDeclared splits the groups and meters of the switch into those a module
// declares (others) and the rest.
func (fs *flowScan) byDeclared(others []entry.Entry) (declared, undeclared []plan.ActualEntry) {
	keys := make(map[string]bool, len(others))
	for _, d := range others {
		keys[plan.Key(d.Kind, d.ID)] = true
	}
	for _, a := range fs.sw.others {
		if keys[plan.Key(a.Kind, a.ID)] {
			declared = append(declared, a)
		} else {
			undeclared = append(undeclared, a)
		}
	}
	return declared, undeclared
}

func (fs *flowScan) skipped(id []byte) bool {
	if len(fs.skip) == 0 {
		return false
	}
	fs.k = append(append(fs.k[:0], byte(entry.KindFlow)), id...)
	return fs.skip[string(fs.k)]
}

// each calls fn for every desired flow from identity from (nil: the first)
// that is not skipped and that the switch lacks (OpAdd) or holds otherwise
// (OpModify), in identity order. With mark, it marks the flows it finds on
// the switch (switchState.pass must have been advanced). It returns the
// number of desired flows read.
func (fs *flowScan) each(from []byte, mark bool, fn func(op plan.Op, rec store.Record) error) (int, error) {
	n := 0
	err := fs.store.Entries().ScanFlows(fs.bridge, from, func(rec store.Record) error {
		n++
		if fs.skipped(rec.ID) {
			return nil
		}
		rec.Payload = fs.forms.Form(rec.Payload)
		if op := fs.sw.lookup(rec.ID, rec.Payload, mark); op != 0 {
			return fn(op, rec)
		}
		return nil
	})
	return n, err
}

// recordEntry copies a scanned flow out of the store's pages.
func recordEntry(rec store.Record) entry.Entry {
	return entry.Entry{Kind: entry.KindFlow, Module: string(rec.Module), ID: bytes.Clone(rec.ID), Payload: bytes.Clone(rec.Payload)}
}

// siblings returns the flow adds after refused in the bundle that the switch
// refuses for the same cause (see siblingRefusals): after an
// OFPFMFC_TABLE_FULL, every later add to that table, read from the store.
func (fs *flowScan) siblings(refused plan.Change, reason string) ([]plan.Change, error) {
	if reason != "OFPFMFC_TABLE_FULL" || refused.Kind != entry.KindFlow || refused.Op != plan.OpAdd {
		return nil, nil
	}
	table := entry.FlowTable(refused.Desired.ID)
	var out []plan.Change
	_, err := fs.each(append(bytes.Clone(refused.Desired.ID), 0), false, func(op plan.Op, rec store.Record) error {
		if entry.FlowTable(rec.ID) != table {
			return store.StopScan
		}
		if op == plan.OpAdd {
			out = append(out, plan.Change{Op: op, Kind: entry.KindFlow, Desired: recordEntry(rec), Index: -1})
		}
		return nil
	})
	return out, err
}
