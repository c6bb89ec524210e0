package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// startOVSDB starts ovsdb-server on the sandbox's database and waits until
// its socket accepts.
func (s *Sandbox) startOVSDB(ctx context.Context) error {
	db, err := startProc(s.log, ovsdbName, s.bin.ovsdbServer, []string{
		s.path(dbFile),
		"--remote=punix:" + s.path(dbSock),
		"--no-chdir",
		"--pidfile=" + s.path(ovsdbName+".pid"),
		"--log-file=" + s.path(ovsdbName+".log"),
		"--unixctl=" + s.path(ovsdbName+".ctl"),
		"-vconsole:off",
	}, s.env, s.path(ovsdbName+".out"))
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ovsdb = db
	s.mu.Unlock()
	if err := waitSocket(ctx, s.path(dbSock), db); err != nil {
		return fmt.Errorf("%w\n%s", err, s.tails(ovsdbName))
	}
	return nil
}

// RestartOVSDB stops ovsdb-server (SIGTERM, then SIGKILL after a grace) and
// starts it again on the same database, as an upgrade of ovsdb-server
// would. vswitchd and every other client see their connection drop and
// must reconnect.
func (s *Sandbox) RestartOVSDB(ctx context.Context) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if err := s.stopOVSDB(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return s.startOVSDB(ctx)
}

// stopOVSDB stops ovsdb-server (SIGTERM, then SIGKILL after a grace) and
// removes its socket, pidfile and control socket. lifeMu must be held.
func (s *Sandbox) stopOVSDB() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	db := s.ovsdb
	s.mu.Unlock()
	if db != nil {
		if err := db.terminate(stopGrace); err != nil {
			return err
		}
	}
	for _, name := range []string{dbSock, ovsdbName + ".pid", ovsdbName + ".ctl"} {
		if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sandbox: remove stale %s: %w", name, err)
		}
	}
	return nil
}
