//go:build tools

// Package tools pins syft, with which make release writes the image's SBOM
// (make syft builds it into bin/syft). A module of its own: syft brings its
// many catalogers' dependencies, which no other tool needs.
package tools

import _ "github.com/anchore/syft/cmd/syft"
