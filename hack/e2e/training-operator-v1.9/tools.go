//go:build tools

// Package tools pins the command this module builds: training-operator's
// v1.9 controller, for the end-to-end suite in test/e2e.
package tools

import _ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
