// Package operator runs an MPI operator's controller, built from the Go
// module proxy by hack/e2e-operators.sh, against an envtest API server with
// the webhook, and holds what the end-to-end suites in test/e2e/mpioperator
// and test/e2e/trainingoperator share: a namespace per spec, the end of the
// controller's log when a spec fails, and waits for what the controller
// creates. There is no kubelet: the suites assert on the Pods the
// controller creates.
package operator

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long Stop waits for the controller to exit on SIGTERM before it kills it.
const stopGrace = 10 * time.Second

// Binary returns the path of an operator's controller from the environment
// variable envVar, which `make test-e2e` sets from hack/e2e-operators.sh.
func Binary(envVar string) (string, error) {
	path := os.Getenv(envVar)
	if path == "" {
		return "", fmt.Errorf("%s is not set: run the suite with `make test-e2e`, which builds the operators", envVar)
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s: %w", envVar, err)
	}
	return path, nil
}

// Process is a running controller.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	mu      sync.Mutex
	err     error // why the process exited; set before exited closes
}

// Start starts binary with args. Its environment holds only KUBECONFIG, set
// to kubeconfig, and env: nothing from the caller's, such as a KUBECONFIG
// for a real cluster or a KUBEFLOW_NAMESPACE that would scope the operator.
// Its output goes to NAME.log in logDir.
func Start(name, binary, kubeconfig, logDir string, env []string, args ...string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"KUBECONFIG=" + kubeconfig}, env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = fmt.Errorf("%s exited: %v; its log ends with:\n%s", name, err, p.LogTail(40))
		p.mu.Unlock()
		close(p.exited)
	}()
	return p, nil
}

// Exited returns why the controller exited, or nil while it runs.
func (p *Process) Exited() error {
	select {
	case <-p.exited:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	default:
		return nil
	}
}

// Stop stops the controller: SIGTERM, then SIGKILL after a grace period.
// Both operators exit non-zero on SIGTERM, so the exit status says nothing.
func (p *Process) Stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s: %w", p.name, err)
	}
	<-p.exited
	return nil
}

// LogTail returns the last lines of the controller's output.
func (p *Process) LogTail(lines int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if lines--; lines == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}
