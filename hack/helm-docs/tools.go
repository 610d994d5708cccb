//go:build tools

// Package tools pins helm-docs, which writes the chart's README from its
// values' comments (make helm-docs). A module of its own: helm-docs brings
// Helm's dependencies, which the other tools do not need.
package tools

import _ "github.com/norwoodj/helm-docs/cmd/helm-docs"
