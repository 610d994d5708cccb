// Command kubectl-delivery stands in for the image kubeflow/kubectl-delivery,
// the init container the training-operator gives every MPIJob launcher to
// copy kubectl into $TARGET_DIR for its kubexec.sh. The job of make
// test-cluster reaches its workers over SSH and needs no kubectl, so this
// only leaves a note where kubectl would be, and exits.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir := os.Getenv("TARGET_DIR")
	if dir == "" {
		fmt.Fprintln(os.Stderr, "kubectl-delivery: TARGET_DIR is not set")
		os.Exit(1)
	}
	note := "make test-cluster's kubectl-delivery stand-in delivers no kubectl\n"
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte(note), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-delivery:", err)
		os.Exit(1)
	}
}
