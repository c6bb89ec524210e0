// Command flowctl is the operator's CLI of flowstated. It speaks the flow
// syntax of ovs-ofctl, and drives planned restarts of ovs-vswitchd
// (prestart, wait, release; deploy/ovs-restart wraps them).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
