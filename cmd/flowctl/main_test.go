package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// asFlowctl makes the test binary behave as flowctl, for the tests that run
// deploy/ovs-restart: it execs flowctl, and this is that flowctl.
const asFlowctl = "FLOWCTL_TEST_AS_FLOWCTL"

func TestMain(m *testing.M) {
	if os.Getenv(asFlowctl) == "1" {
		main()
	}
	code := m.Run()
	if flowstatedBin != "" {
		_ = os.RemoveAll(filepath.Dir(flowstatedBin))
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
