//go:build tools

// Package tools pins the tools the Makefile builds into bin/: their versions
// live in this module's go.mod, apart from the webhook's, so that none of
// them is a dependency of the product.
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	_ "github.com/tsenart/vegeta/v12"
	_ "golang.org/x/perf/cmd/benchstat"
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
