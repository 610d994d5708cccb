#!/usr/bin/env bash
# new-release.sh VERSION writes hack/envtest/releases/vVERSION, the module that
# builds kube-apiserver VERSION from the Go module proxy for make test-versions
# (hack/envtest-assets.sh). k8s.io/kubernetes points its staging modules at
# ./staging, which a dependant cannot follow, so each becomes a replace by the
# matching v0 release, as hack/envtest/go.mod does for the newest version.
set -euo pipefail
version=${1:?usage: new-release.sh VERSION, for example 1.32.13}
version=${version#v}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir="$here/releases/v$version"
mkdir -p "$dir"
cd "$dir"
export GOWORK=off GOFLAGS=-mod=mod
gomod=$(go mod download -json "k8s.io/kubernetes@v$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[[ -f $gomod ]] || { echo "new-release.sh: no go.mod for k8s.io/kubernetes v$version" >&2; exit 1; }
rm -f go.mod go.sum
go mod init "github.com/flyteorg/flyte-mpi-webhook/hack/envtest/releases/k8s-$version"
sed -i "1i // Module v$version builds kube-apiserver v$version for make test-versions (hack/envtest/new-release.sh)." go.mod
go mod edit -go=1.26.0
while read -r mod; do
	go mod edit -replace "$mod=$mod@v0.${version#*.}"
done < <(sed -n 's#^\t\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$gomod")
go mod edit -require "k8s.io/kubernetes@v$version"
cat >tools.go <<GO
//go:build tools

// Package tools pins the command this module builds.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
go mod tidy
echo "$dir"
