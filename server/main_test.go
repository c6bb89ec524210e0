package server_test

import (
	"io"
	"os"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/klog/v2"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		// The test binary re-run as a client process (sessions_test.go).
		os.Exit(runHelperClient())
	}
	if raw := os.Getenv(pfChildEnv); raw != "" {
		// The test binary re-run as flowstated (proxyfault_test.go).
		os.Exit(runProxyFaultChild(raw))
	}
	if raw := os.Getenv(undoChildEnv); raw != "" {
		// The test binary re-run as flowstated (overlap_test.go).
		os.Exit(runUndoChild(raw))
	}
	if raw := os.Getenv(paChildEnv); raw != "" {
		// The test binary re-run as a controller (proxyauth_test.go).
		os.Exit(runProxyAuthChild(raw))
	}
	// libOpenflow reports what it cannot decode through klog; ofconn falls
	// back to the raw bytes, so these are noise in test output.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	// Every daemon, client and sandbox a test starts is stopped by then.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}
