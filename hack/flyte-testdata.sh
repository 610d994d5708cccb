#!/usr/bin/env bash
# Generates the Flyte-built testdata (testdata/flyte) with the tools module
# hack/flyte-testdata, which runs flytepropeller's k8s plugin manager and
# flyteplugins' mpi plugin on TaskTemplates as flytekit writes them.
#
#   hack/flyte-testdata.sh generate DIR   rewrite DIR/v1 and DIR/v2beta1
#   hack/flyte-testdata.sh check DIR      generate into a temporary directory and
#                                         fail, with a diff, when DIR differs
#   hack/flyte-testdata.sh binary         print FLYTE_TESTDATA_BIN=<path of the
#                                         generator>, for test/e2e/flyte, which runs
#                                         its launch subcommand
#
# The generator is built once per content of hack/flyte-testdata (go.mod,
# go.sum, *.go) and Go version, and cached in $FLYTE_TESTDATA_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/flyte-testdata) under
# <hash>/, so that a later run takes seconds. Progress goes to standard error.
set -euo pipefail
shopt -s inherit_errexit # generator runs in $(...): let a failed build there fail it

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/flyte-testdata"
cache=${FLYTE_TESTDATA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/flyte-testdata}

log() { echo "flyte-testdata: $*" >&2; }
# shellcheck source=hack/build-cached.sh
source "$here/build-cached.sh"

usage() {
	log "usage: $0 generate|check DIR, or $0 binary"
	exit 2
}

# generator prints the path of the generator binary, building it when the
# cache has none for this content of the tools module.
generator() {
	local key
	key=$( (
		cd "$module"
		go env GOVERSION
		sha256sum go.mod go.sum ./*.go
	) | sha256sum | cut -c1-16)
	build_cached "$module" . "$cache/$key/flyte-testdata"
}

if [[ $# -eq 1 && $1 == binary ]]; then
	echo "FLYTE_TESTDATA_BIN=$(generator)"
	exit 0
fi
[[ $# -eq 2 ]] || usage
mode=$1 target=$2
bin=$(generator)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" -out "$tmp" >&2

case "$mode" in
generate)
	mkdir -p "$target"
	rm -rf "$target/v1" "$target/v2beta1"
	cp -R "$tmp/v1" "$tmp/v2beta1" "$target/"
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
