//go:build tools

// Package tools pins the Helm CLI that make release packages the chart with
// (make helm builds it into bin/helm): a module of its own, so that Helm's
// dependencies are none of the webhook's nor of hack/tools'.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
