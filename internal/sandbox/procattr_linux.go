package sandbox

import "syscall"

// childAttr makes the kernel kill a daemon when the Go process dies, so a
// crashed test binary leaves no ovsdb-server or ovs-vswitchd behind. The
// signal is tied to the OS thread that forked the child; Go only retires
// threads that exit while locked (runtime.LockOSThread), which the sandbox
// never does.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
