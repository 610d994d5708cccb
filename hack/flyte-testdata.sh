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
#   hack/flyte-testdata.sh propeller-patched
#                                         print PATCHED_PROPELLER_BIN=<the same,
#                                         with flyteplugins patched by the fix of
#                                         hack/upstream>, for make test-cluster
#
# generate and check also write DIR/upstream (docs/UPSTREAM.md): patched/v1
# and patched/v2beta1, every case (and the generator's UpstreamCases) built by
# v1.16.8's backend with flyteplugins patched by
# hack/upstream/flyteplugins-mpi-worker-command.patch; and published/v1 and
# published/v2beta1, UpstreamCases built by v1.16.8 as published (Cases' are
# DIR/v1 and DIR/v2beta1).
#
# Each binary is built once per content of its module (go.mod, go.sum,
# *.go), of the shared hack/flyte-testdata/generator (and, for the tests',
# of test/flyte), and Go version, and cached in $FLYTE_TESTDATA_CACHE
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/flyte-testdata)
# under <release>/<hash>/, so that a later run takes seconds. They are built
# one at a time. The patched ones are built from the same modules, with
# flyteplugins replaced by the patched copy that hack/upstream/flyteplugins.sh
# makes (once per content of the patch): in a go.mod generated from the
# module's beside the binary, with the module's go.sum (go build -modfile),
# so that no go.mod of the tree names the copy; under <release>-patched/,
# keyed by the patch too. Progress goes to standard error.
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
	log "usage: $0 generate|check DIR, or $0 backend|propeller|propeller-patched"
	exit 2
}

# generator MODULE RELEASE [NAME [DIR...]] prints the path of the binary
# (NAME, default flyte-testdata) of the Go module MODULE, building it when
# the cache has none for this content of the module, of the shared generator
# and of each DIR, whose packages the module compiles too. With $patched set
# (the patched flyteplugins' directory, whose name holds the patch's hash),
# flyteplugins is replaced by it, in a go.mod generated beside the binary.
generator() {
	local module=$1 release=$2 name=${3:-flyte-testdata} key dir
	local dirs=("$tools/generator" "${@:4}")
	key=$( (
		go env GOVERSION
		echo "${patched:-}"
		cd "$module"
		sha256sum go.mod go.sum ./*.go
		for dir in "${dirs[@]}"; do
			cd "$dir"
			find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs sha256sum
		done
	) | sha256sum | cut -c1-16)
	if [[ -z ${patched:-} ]]; then
		build_cached "$module" . "$cache/$release/$key/$name"
		return
	fi
	# go build -modfile=FILE.mod reads FILE.sum beside it; relative replace
	# paths stay relative to MODULE.
	local out=$cache/$release-patched/$key
	mkdir -p "$out"
	cp "$module/go.mod" "$out/go.mod"
	cp "$module/go.sum" "$out/go.sum"
	go mod edit -replace "github.com/flyteorg/flyte/flyteplugins=$patched" "$out/go.mod"
	build_cached "$module" . "$out/$name" -modfile="$out/go.mod"
}

# patched_flyteplugins sets patched to the directory of flyteplugins v1.16.8
# with hack/upstream's patch, made once per content of the patch.
patched_flyteplugins() {
	local line
	line=$("$here/upstream/flyteplugins.sh" dir)
	patched=${line#FLYTEPLUGINS_PATCHED=}
	[[ -d $patched ]] || { log "hack/upstream/flyteplugins.sh dir gave no directory: $line"; return 1; }
}

if [[ $# -eq 1 && $1 == backend ]]; then
	echo "FLYTE_BACKEND_BIN=$(generator "$tests/flyte" backend-v1.16.8 flyte-backend "$tests/flyte")"
	exit 0
fi
if [[ $# -eq 1 && $1 == propeller ]]; then
	echo "PROPELLER_BIN=$(generator "$tests/cluster/propeller" propeller-v1.16.8 flytepropeller "$tests/flyte")"
	exit 0
fi
if [[ $# -eq 1 && $1 == propeller-patched ]]; then
	patched_flyteplugins
	echo "PATCHED_PROPELLER_BIN=$(generator "$tests/cluster/propeller" propeller-v1.16.8 flytepropeller "$tests/flyte")"
	exit 0
fi
[[ $# -eq 2 ]] || usage
mode=$1 target=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$(generator "$tools" v1.16.8)
"$bin" -out "$tmp" >&2
"$bin" -out "$tmp/upstream/published" -cases upstream >&2
patched_flyteplugins
bin=$(generator "$tools" v1.16.8)
"$bin" -out "$tmp/upstream/patched" -cases all -patched hack/upstream/flyteplugins-mpi-worker-command.patch >&2
unset patched
mapfile -t releases < <(cd "$tools/releases" && ls -d v* | sort -V)
for release in "${releases[@]}"; do
	bin=$(generator "$tools/releases/$release" "$release")
	"$bin" -out "$tmp/releases/$release" -v2beta1=false >&2
done

case "$mode" in
generate)
	mkdir -p "$target"
	rm -rf "$target/v1" "$target/v2beta1" "$target/releases" "$target/upstream"
	cp -R "$tmp/v1" "$tmp/v2beta1" "$tmp/releases" "$tmp/upstream" "$target/"
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
