package sandbox

import (
	"context"
	"fmt"
)

// UpgradeOVSDB replaces the sandbox's Open vSwitch with the one whose
// binaries are in binDir, as an in-place package upgrade does: ovsdb-server
// is stopped, the database converted to schema by the new ovsdb-tool (what
// ovs-ctl's upgrade-db does), and the new ovsdb-server started on the same
// file. A running vswitchd keeps its old binary until it is restarted
// (StopVswitchd, StartVswitchd); every later command runs the new binaries.
// It must not run concurrently with the sandbox's other methods, which read
// the binaries' paths unlocked.
func (s *Sandbox) UpgradeOVSDB(ctx context.Context, binDir, schema string) error {
	bin, err := findBinaries(binDir)
	if err != nil {
		return err
	}
	if schema, err = findSchema(schema); err != nil {
		return err
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if err := s.stopOVSDB(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if _, err := s.run(ctx, bin.ovsdbTool, "convert", s.path(dbFile), schema); err != nil {
		return fmt.Errorf("sandbox: upgrade the database: %w", err)
	}
	s.bin, s.schema = bin, schema
	return s.startOVSDB(ctx)
}
