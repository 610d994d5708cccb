//go:build tools

// Package tools pins the Helm CLI, with which make test-cluster installs and
// upgrades the chart, as users do.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
