package operator

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the controller when the test binary dies without
// stopping it (go test's -timeout, a crash), so that no controller outlives
// its API server and holds a port the next run needs.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
