//go:build !linux

package sandbox

import "syscall"

// childAttr has no parent-death signal outside Linux; Close still stops the
// daemons.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
