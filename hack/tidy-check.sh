#!/usr/bin/env bash
# tidy-check.sh fails, naming each module and showing the change, when
# `go mod tidy` would change the go.mod or go.sum of any Go module of the
# repository: every go.mod that git tracks, or would track (the root,
# hack/tools, hack/flyte-testdata and its releases, test/helm, ...). It runs
# `go mod tidy -diff`, which changes no file. make lint runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "tidy-check: $*" >&2; }
# Each module on its own, as its builds see it, whatever go.work is around.
export GOWORK=off

# The modules' directories: ., hack/image, ...
mapfile -t modules < <(git ls-files --cached --others --exclude-standard -- ':(glob)**/go.mod' |
	while read -r mod; do if [[ -f $mod ]]; then dirname "$mod"; fi; done | LC_ALL=C sort -u)
((${#modules[@]} > 0)) || { log "no go.mod under $PWD"; exit 1; }

err=$(mktemp)
trap 'rm -f "$err"' EXIT
untidy=() failed=()
for dir in "${modules[@]}"; do
	if diff=$(go -C "$dir" mod tidy -diff 2>"$err"); then
		continue
	fi
	if [[ -n $diff ]]; then
		log "$dir/go.mod: go mod tidy would change:"
		echo "$diff"
		untidy+=("$dir")
	else
		# No diff: go could not load the module (a download, a syntax error).
		log "$dir/go.mod: go mod tidy -diff failed:"
		grep -v '^go: downloading ' "$err" >&2 || true
		failed+=("$dir")
	fi
done
for dir in "${untidy[@]}"; do
	log "$dir/go.mod is not tidy: run go -C $dir mod tidy"
done
for dir in "${failed[@]}"; do
	log "$dir/go.mod could not be checked"
done
((${#untidy[@]} + ${#failed[@]} == 0)) || exit 1
log "${#modules[@]} modules tidy"
