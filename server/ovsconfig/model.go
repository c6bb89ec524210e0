package ovsconfig

import (
	"github.com/ovn-org/libovsdb/model"
)

// Table and column names of the Open_vSwitch schema used here.
const (
	dbName             = "Open_vSwitch"
	tableOpenvSwitch   = "Open_vSwitch"
	tableBridge        = "Bridge"
	colNextCfg         = "next_cfg"
	keyFlowRestoreWait = "flow-restore-wait"
)

// ovsRow is a partial model of the Open_vSwitch table: only the columns this
// package reads or writes, so the monitor carries nothing else. libovsdb
// requires the _uuid field.
type ovsRow struct {
	UUID        string            `ovsdb:"_uuid"`
	OtherConfig map[string]string `ovsdb:"other_config"`
	NextCfg     int               `ovsdb:"next_cfg"`
	CurCfg      int               `ovsdb:"cur_cfg"`
}

// bridgeRow is a partial model of the Bridge table, kept for diagnosing
// OpenFlow version and datapath problems.
type bridgeRow struct {
	UUID         string            `ovsdb:"_uuid"`
	Name         string            `ovsdb:"name"`
	Protocols    []string          `ovsdb:"protocols"`
	DatapathType string            `ovsdb:"datapath_type"`
	FailMode     *string           `ovsdb:"fail_mode"`
	OtherConfig  map[string]string `ovsdb:"other_config"`
	ExternalIDs  map[string]string `ovsdb:"external_ids"`
}

// Bridge is what the Client knows about one row of the Bridge table.
type Bridge struct {
	// Name is the bridge name (immutable in OVS).
	Name string
	// Protocols lists the allowed OpenFlow versions ("OpenFlow13", ...).
	// Empty means OVS's default set, which includes OpenFlow 1.5.
	Protocols []string
	// DatapathType is "system", "netdev", "dummy" or empty (= "system").
	DatapathType string
	// FailMode is "standalone", "secure" or empty (= standalone).
	FailMode string
	// OtherConfig is a copy of the bridge's other_config column.
	OtherConfig map[string]string
	// ExternalIDs is a copy of the bridge's external_ids column, where
	// flowstate records which store manages the bridge.
	ExternalIDs map[string]string

	uuid string // the row's _uuid, for transactions
}

func newClientDBModel() (model.ClientDBModel, error) {
	return model.NewClientDBModel(dbName, map[string]model.Model{
		tableOpenvSwitch: &ovsRow{},
		tableBridge:      &bridgeRow{},
	})
}

func (b *bridgeRow) toBridge() Bridge {
	out := Bridge{
		uuid:         b.UUID,
		Name:         b.Name,
		Protocols:    append([]string(nil), b.Protocols...),
		DatapathType: b.DatapathType,
		OtherConfig:  make(map[string]string, len(b.OtherConfig)),
		ExternalIDs:  make(map[string]string, len(b.ExternalIDs)),
	}
	for k, v := range b.ExternalIDs {
		out.ExternalIDs[k] = v
	}
	if b.FailMode != nil {
		out.FailMode = *b.FailMode
	}
	for k, v := range b.OtherConfig {
		out.OtherConfig[k] = v
	}
	return out
}
