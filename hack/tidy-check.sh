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

# The modules are checked four at a time: a first run downloads each one's
# modules, and waits more on the network and the disk than on a core.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
check() { # INDEX DIR
	go -C "$2" mod tidy -diff >"$out/$1.diff" 2>"$out/$1.err" && echo 0 >"$out/$1.rc" || echo $? >"$out/$1.rc"
}
for i in "${!modules[@]}"; do
	while (($(jobs -rp | wc -l) >= 4)); do wait -n || true; done
	check "$i" "${modules[$i]}" &
done
wait
untidy=() failed=()
for i in "${!modules[@]}"; do
	dir=${modules[$i]}
	[[ $(cat "$out/$i.rc") == 0 ]] && continue
	if [[ -s "$out/$i.diff" ]]; then
		log "$dir/go.mod: go mod tidy would change:"
		cat "$out/$i.diff"
		untidy+=("$dir")
	else
		# No diff: go could not load the module (a download, a syntax error).
		log "$dir/go.mod: go mod tidy -diff failed:"
		grep -v '^go: downloading ' "$out/$i.err" >&2 || true
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
