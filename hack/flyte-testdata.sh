#!/usr/bin/env bash
# Generates the Flyte-built testdata (testdata/flyte) with the tools module
# hack/flyte-testdata (Flyte v1.16.8) and one tools module per older Flyte
# release, hack/flyte-testdata/releases/VERSION, which run that release's
# backend (flytepropeller's k8s plugin manager and flyteplugins' mpi plugin)
# on TaskTemplates as flytekit writes them.
#
#   hack/flyte-testdata.sh generate DIR   rewrite DIR/v1 and DIR/v2beta1 (v1.16.8),
#                                         and DIR/releases/VERSION/v1 for each release
#   hack/flyte-testdata.sh check DIR      generate into a temporary directory and
#                                         fail, with a diff, when DIR differs
#   hack/flyte-testdata.sh backend        print FLYTE_BACKEND_BIN=<path of the
#                                         tests' Flyte backend, v1.16.8 (test/flyte,
#                                         which compiles the generator too)>, whose
#                                         launch test/e2e/flyte and test/cluster run
#   hack/flyte-testdata.sh propeller      print PROPELLER_BIN=<path of Flyte's
#                                         controller, flytepropeller v1.16.8 with
#                                         the mpi plugin (test/cluster/propeller,
#                                         which compiles test/flyte and the
#                                         generator too)>, for make test-cluster
#
# Each binary is built once per content of its module (go.mod, go.sum,
# *.go), of the shared hack/flyte-testdata/generator (and, for the tests',
# of test/flyte), and Go version, and cached in $FLYTE_TESTDATA_CACHE
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/flyte-testdata)
# under <release>/<hash>/, so that a later run takes seconds. They are built
# one at a time. Progress goes to standard error.
set -euo pipefail
shopt -s inherit_errexit # generator runs in $(...): let a failed build there fail it

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="$here/flyte-testdata"
tests="$here/../test"
cache=${FLYTE_TESTDATA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/flyte-testdata}

log() { echo "flyte-testdata: $*" >&2; }
# shellcheck source=hack/build-cached.sh
source "$here/build-cached.sh"

usage() {
	log "usage: $0 generate|check DIR, or $0 backend|propeller"
	exit 2
}

# generator MODULE RELEASE [NAME [DIR...]] prints the path of the binary
# (NAME, default flyte-testdata) of the Go module MODULE, building it when
# the cache has none for this content of the module, of the shared generator
# and of each DIR, whose packages the module compiles too.
generator() {
	local module=$1 release=$2 name=${3:-flyte-testdata} key dir
	local dirs=("$tools/generator" "${@:4}")
	key=$( (
		go env GOVERSION
		cd "$module"
		sha256sum go.mod go.sum ./*.go
		for dir in "${dirs[@]}"; do
			cd "$dir"
			find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs sha256sum
		done
	) | sha256sum | cut -c1-16)
	build_cached "$module" . "$cache/$release/$key/$name"
}

if [[ $# -eq 1 && $1 == backend ]]; then
	echo "FLYTE_BACKEND_BIN=$(generator "$tests/flyte" backend-v1.16.8 flyte-backend "$tests/flyte")"
	exit 0
fi
if [[ $# -eq 1 && $1 == propeller ]]; then
	echo "PROPELLER_BIN=$(generator "$tests/cluster/propeller" propeller-v1.16.8 flytepropeller "$tests/flyte")"
	exit 0
fi
[[ $# -eq 2 ]] || usage
mode=$1 target=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$(generator "$tools" v1.16.8)
"$bin" -out "$tmp" >&2
mapfile -t releases < <(cd "$tools/releases" && ls -d v* | sort -V)
for release in "${releases[@]}"; do
	bin=$(generator "$tools/releases/$release" "$release")
	"$bin" -out "$tmp/releases/$release" -v2beta1=false >&2
done

case "$mode" in
generate)
	mkdir -p "$target"
	rm -rf "$target/v1" "$target/v2beta1" "$target/releases"
	cp -R "$tmp/v1" "$tmp/v2beta1" "$tmp/releases" "$target/"
	log "wrote $target"
	;;
check)
	if ! diff -ru "$target" "$tmp" >&2; then
		log "$target is stale: run make testdata and commit the result"
		exit 1
	fi
	log "$target is current"
	;;
*)
	usage
	;;
esac
