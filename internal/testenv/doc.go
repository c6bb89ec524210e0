// Package testenv is the one "sandbox, in-process flowstated, connected
// client, wait until converged" of the tests: a private Open vSwitch
// (internal/sandbox) with dummy bridges and ports, a server.Config for a
// flowstated managing them, a client.Client on its socket, and helpers to
// start, stop and restart that flowstated in the test's own process.
//
// # Use
//
//	e := testenv.Start(ctx, t)                    // running and converged
//	e := testenv.New(ctx, t, testenv.Configure(func(c *server.Config) {
//		c.RequiredModules = []string{"pipeline"}
//	}))
//	e.Start(ctx)                                  // later, after more setup
//
// Every bridge the sandbox holds has dummy ports <bridge>-p1 (ofport 1) and
// <bridge>-p2 (ofport 2); flowstated manages br-int unless Configure says
// otherwise. The boot id file holds "test-boot", so a restart of the
// in-process flowstated is a warm start.
//
// Everything an Env starts is stopped by t.Cleanup, in reverse order
// (flowstated, then the client, then the sandbox), so tests can check for
// leaked goroutines in TestMain. On a failed test the tail of vswitchd's log
// goes to the test log.
//
// Only _test.go files import this package (depguard in .golangci.yml says
// so). It imports server and client, so tests of package server itself use
// it from package server_test.
package testenv
