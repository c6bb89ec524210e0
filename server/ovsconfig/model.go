package ovsconfig

import (
	"github.com/ovn-org/libovsdb/model"
)

// Table and column names of the Open_vSwitch schema used here.
const (
	dbName             = "Open_vSwitch"
	tableOpenvSwitch   = "Open_vSwitch"
	tableBridge        = "Bridge"
	tableFlowTable     = "Flow_Table"
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
	OVSVersion  *string           `ovsdb:"ovs_version"`
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
	// FlowTables maps OpenFlow table ids to Flow_Table row uuids.
	FlowTables map[int]string `ovsdb:"flow_tables"`
}

// flowTableRow is a partial model of the Flow_Table table: the columns that
// decide whether vswitchd refuses flows beyond a limit.
type flowTableRow struct {
	UUID           string  `ovsdb:"_uuid"`
	FlowLimit      *int    `ovsdb:"flow_limit"`
	OverflowPolicy *string `ovsdb:"overflow_policy"`
}

// TableLimit is the flow limit OVSDB sets on one OpenFlow table of a bridge
// (Flow_Table flow_limit, see ovs-vswitchd.conf.db(5)).
type TableLimit struct {
	// Table is the OpenFlow table id.
	Table uint8
	// FlowLimit is the most flows the table holds; flows without timeouts
	// count too.
	FlowLimit int
	// Evict is true with overflow_policy=evict: vswitchd then makes room by
	// deleting flows that have a timeout, and refuses an add only when no
	// such flow is left. Otherwise (refuse, the default) it refuses every
	// add beyond the limit with OFPFMFC_TABLE_FULL.
	Evict bool
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
		tableFlowTable:   &flowTableRow{},
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
