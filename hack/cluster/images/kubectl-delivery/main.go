// Command kubectl-delivery does what the image kubeflow/kubectl-delivery
// does, the init container the training-operator gives every MPIJob
// launcher: it copies kubectl (here /bin/kubectl, a static build of
// k8s.io/kubernetes, beside it in the image) into $TARGET_DIR, where the
// launcher's kubexec.sh runs it to start the ranks in the workers with
// `kubectl exec`.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// kubectl is where the image holds kubectl.
const kubectl = "/bin/kubectl"

func main() {
	if err := deliver(os.Getenv("TARGET_DIR")); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-delivery:", err)
		os.Exit(1)
	}
}

// deliver copies kubectl into dir, whole or not at all.
func deliver(dir string) error {
	if dir == "" {
		return fmt.Errorf("TARGET_DIR is not set")
	}
	src, err := os.Open(kubectl)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".kubectl-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("copying %s: %w", kubectl, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	dest := filepath.Join(dir, "kubectl")
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return err
	}
	fmt.Printf("kubectl-delivery: copied %s to %s\n", kubectl, dest)
	return nil
}
