package framework

import (
	"os"
	"path/filepath"
)

// WriteKubeConfig writes a kubeconfig with admin rights on the API server
// into dir, for processes the suites start, such as the MPI operators of
// test/e2e, and returns its path.
func (e *Env) WriteKubeConfig(dir string) (string, error) {
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, e.testEnv.KubeConfig, 0o600)
}
