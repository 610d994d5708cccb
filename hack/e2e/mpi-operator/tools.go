//go:build tools

// Package tools pins the command this module builds: mpi-operator's
// controller, for the end-to-end suite in test/e2e.
package tools

import _ "github.com/kubeflow/mpi-operator/cmd/mpi-operator"
