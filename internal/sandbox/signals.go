package sandbox

import "syscall"

// Signals used on the daemons. Kept together so the few places that freeze,
// thaw or stop a process read the same way.
const (
	sigTerm = syscall.SIGTERM
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
	sigKill = syscall.SIGKILL
)
