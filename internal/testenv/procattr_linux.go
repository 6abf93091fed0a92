package testenv

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes cmd get SIGKILL when the test binary dies: a `go test -timeout` panic
// skips every t.Cleanup, and servers left running would hold ports and disk after the run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
