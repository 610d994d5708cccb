#!/usr/bin/env bash
# Applies the upstream fix, flyteplugins-mpi-worker-command.patch, to
# flyteplugins as published at the release test/cluster/propeller builds
# (v1.16.8), and runs the MPI plugin's own tests there, as Flyte's CI would
# on the pull request (docs/UPSTREAM.md).
#
#   hack/upstream/flyteplugins.sh [check]  the tests pass with the patch; and
#                                          with its tests but not its mpi.go,
#                                          exactly want_failing below fail
#   hack/upstream/flyteplugins.sh dir      print FLYTEPLUGINS_PATCHED=<the
#                                          patched module's directory>
#
# The module is copied from the module cache, with the three modules its
# go.mod replaces by ../flyteidl, ../flytepropeller and ../flytestdlib beside
# it at the same release, as in flyteorg/flyte: its go.mod and go.sum as
# published, read-only (-mod=readonly). The copies are made once per content
# of the patch, in $UPSTREAM_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/upstream) under
# flyteplugins-<release>-<the patch's sha256>/; the tests' build is in Go's
# cache. Progress goes to standard error.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
patch_file=$here/flyteplugins-mpi-worker-command.patch
cache=${UPSTREAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/upstream}
plugin=github.com/flyteorg/flyte/flyteplugins
package=./go/tasks/plugins/k8s/kfoperators/mpi/...

# The tests that the patch adds or changes to assert the worker's command:
# without the change to mpi.go they must fail, and no other test.
want_failing=(
	TestBuildResourceMPIV1
	TestBuildResourceMPIV1WithOnlyWorkerReplica
	TestBuildResourceMPIWorkerSpecCommand
)

log() { echo "upstream: $*" >&2; }

mode=${1:-check}
[[ $# -le 1 && ($mode == check || $mode == dir) ]] || { log "usage: $0 [check|dir]"; exit 2; }

# Each Flyte module as its own builds see it, whatever go.work or GOFLAGS are around.
export GOWORK=off GOFLAGS=-mod=readonly GONOSUMDB=${GONOSUMDB:+$GONOSUMDB,}github.com/flyteorg

# The release: the one test/cluster/propeller builds, which the patched
# flytepropeller is to be.
release=$(go -C "$root/test/cluster/propeller" list -m -f '{{.Version}}' "$plugin")

# module_dir MODULE prints the module cache's directory of MODULE at the release.
module_dir() {
	local dir
	dir=$(cd / && go mod download -json "$1@$release" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[[ -n $dir && -d $dir ]] || { log "go mod download $1@$release gave no directory"; return 1; }
	echo "$dir"
}

# tree DIR [GIT APPLY FLAGS...] makes DIR/flyteplugins, the module with the
# patch applied by git apply and its flags (--include to take a part), and
# links its siblings.
tree() {
	local dir=$1
	shift
	mkdir -p "$dir"
	cp -R "$(module_dir "$plugin")" "$dir/flyteplugins"
	chmod -R u+w "$dir/flyteplugins"
	# git apply outside any repository: applies the whole patch exactly, or nothing.
	local out
	if ! out=$(GIT_CEILING_DIRECTORIES=$dir git -C "$dir/flyteplugins" apply "$@" "$patch_file" 2>&1); then
		log "${patch_file#"$root"/} does not apply to $plugin $release as published:"
		echo "$out" >&2
		log "make it again from a copy of the module: its diff from the module's root (docs/UPSTREAM.md)"
		return 1
	fi
	# The one module of the go.mod the Go module proxy does not serve:
	# github.com/kubeflow/spark-operator's pseudo-version, which only the spark
	# plugin imports. An empty module stands in for it, so that the module
	# graph loads.
	mkdir -p "$dir/spark-operator"
	printf 'module github.com/kubeflow/spark-operator\n' > "$dir/spark-operator/go.mod"
	go -C "$dir/flyteplugins" mod edit -replace github.com/kubeflow/spark-operator=../spark-operator
}

# siblings DIR links DIR/flyteidl, flytepropeller and flytestdlib, which the
# module's go.mod replaces, to the module cache: each run, so that a cleaned
# module cache is downloaded again.
siblings() {
	local name
	for name in flyteidl flytepropeller flytestdlib; do
		ln -sfn "$(module_dir "github.com/flyteorg/flyte/$name")" "$1/$name"
	done
}

# docs/UPSTREAM.md shows the patch's change to mpi.go: the same, but its index line.
page=$root/docs/UPSTREAM.md
if ! diff -u --label "the patch's mpi.go" --label "${page#"$root"/}'s diff" \
	<(awk '/^diff --git /{p = / a\/go\/tasks\/plugins\/k8s\/kfoperators\/mpi\/mpi.go /} p && !/^index /' "$patch_file") \
	<(awk '/^```diff$/{p = 1; next} /^```$/{p = 0} p' "$page") >&2; then
	log "${page#"$root"/}: its diff of mpi.go is not the patch's: copy it from ${patch_file#"$root"/}"
	exit 1
fi

key=$(sha256sum "$patch_file" | cut -c1-16)
dir=$cache/flyteplugins-$release-$key
if [[ ! -d $dir ]]; then
	log "applying ${patch_file#"$root"/} to $plugin $release in $dir"
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.flyteplugins.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	tree "$tmp/patched"
	tree "$tmp/tests-only" --include='*_test.go'
	mv "$tmp" "$dir"
	trap - EXIT
fi
siblings "$dir/patched"
siblings "$dir/tests-only"

if [[ $mode == dir ]]; then
	echo "FLYTEPLUGINS_PATCHED=$dir/patched/flyteplugins"
	exit 0
fi

# run NAME: go test -v of the MPI plugin in $dir/NAME/flyteplugins, its output
# in $dir/NAME.log; prints the top-level tests' results, one a line.
run() {
	local start=$SECONDS
	log "go test $package in $1 (the first build of its dependencies takes minutes)"
	(cd "$dir/$1/flyteplugins" && go test -count=1 -v "$package") > "$dir/$1.log" 2>&1 || true
	log "$1: done in $((SECONDS - start))s, output in $dir/$1.log"
	if grep -q '^FAIL.*\[\(build\|setup\) failed\]$\|^# ' "$dir/$1.log"; then
		cat "$dir/$1.log" >&2
		log "$1: the tests did not build"
		return 1
	fi
	grep -E '^--- (PASS|FAIL)' "$dir/$1.log" | sort -k3 || true
}

# As Flyte's lint would: the changed files gofmt'd.
unformatted=$(cd "$dir/patched/flyteplugins" && gofmt -l "${package%/...}")
[[ -z $unformatted ]] || { log "with the patch, not gofmt'd: $unformatted"; exit 1; }

patched=$(run patched)
echo "$patched"
passed=$(grep -c '^--- PASS' <<< "$patched" || true)
failed=$(grep -c '^--- FAIL' <<< "$patched" || true)
subtests=$(grep -c '^    --- PASS' "$dir/patched.log" || true)
if ((failed > 0 || passed == 0)) || ! grep -q '^ok ' "$dir/patched.log"; then
	cat "$dir/patched.log" >&2
	log "with the patch: $failed of $((passed + failed)) tests failed"
	exit 1
fi

tests_only=$(run tests-only)
mapfile -t got_failing < <(sed -n 's/^--- FAIL: \([^ ]*\) .*/\1/p' <<< "$tests_only" | LC_ALL=C sort)
mapfile -t want < <(printf '%s\n' "${want_failing[@]}" | LC_ALL=C sort)
if [[ "${got_failing[*]}" != "${want[*]}" ]]; then
	echo "$tests_only"
	log "with the patch's tests but not its mpi.go, want failing: ${want[*]}; got: ${got_failing[*]:-none}"
	exit 1
fi

echo "upstream-check: $plugin $release with ${patch_file#"$root"/}: $passed tests of the MPI plugin passed ($subtests subtests);" \
	"without its change to mpi.go, ${#got_failing[@]} fail as they must: ${got_failing[*]}"
