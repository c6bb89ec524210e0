package ofmods

// OpenFlow 1.5 offsets the tests write messages with (Apply reads them
// through package entry).
const (
	offCookie    = 8
	offTable     = 24
	offCommand   = 25
	offModCmd    = 8 // GROUP_MOD and METER_MOD command
	offModID     = 12
	offBucketCmd = 20
	offGroupType = 10
)
