package main

import (
	"os"
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
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}
