//go:build tools

// Package tools pins actionlint, which make lint runs on .github/workflows
// (make actionlint builds it into bin/actionlint). A module of its own:
// actionlint needs go.yaml.in/yaml/v4 v4.0.0-rc.3, whose API rc.6, which
// golangci-lint's gosec brings into hack/tools, changed.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
