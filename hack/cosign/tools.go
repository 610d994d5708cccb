//go:build tools

// Package tools pins cosign, with which make release signs the image, attaches
// its SBOM as an attestation and signs the chart (make cosign builds it into
// bin/cosign). A module of its own: cosign brings the sigstore clients and
// the cloud KMS SDKs, which no other tool needs.
package tools

import _ "github.com/sigstore/cosign/v3/cmd/cosign"
