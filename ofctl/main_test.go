package ofctl

import (
	"flag"
	"io"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/klog/v2"
)

func TestMain(m *testing.M) {
	// libOpenflow logs every decoding failure through klog; the tests provoke
	// them on purpose.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}
