#!/usr/bin/env bash
# dependabot-check.sh fails, naming the module, when a Go module of the
# repository (every go.mod that git tracks, or would track) is neither in
# the directories of .github/dependabot.yml's gomod updates nor held below;
# when a directory listed there has no go.mod; and when one is both. make
# lint runs it, so that a new module is never left out of the week's updates
# by forgetting it (CONTRIBUTING.md, "Dependencies").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "dependabot-check: $*" >&2; }

# The modules held at an upstream release on purpose, which a bot must not
# move: each is what a test reproduces or runs against, and moves, by hand,
# with the Makefile's or a script's version (CONTRIBUTING.md says how).
# Patterns as bash's [[ == ]] reads them.
held=(
	# kube-apiserver and etcd of ENVTEST_K8S_VERSION, and of each older
	# release make test-versions runs (hack/envtest/new-release.sh).
	hack/envtest
	'hack/envtest/releases/*'
	# The operators whose CRDs the tests install (TRAINING_OPERATOR_VERSION,
	# TRAINING_OPERATOR_V1_9_VERSION, and the root go.mod's mpi-operator).
	'hack/e2e/*'
	# Each Flyte release's backend, the testdata's generator, and Flyte v1.16.8
	# for the tests and the cluster (make testdata).
	hack/flyte-testdata
	'hack/flyte-testdata/*'
	test/flyte
	test/cluster/propeller
	# make test-cluster's node: Kubernetes' binaries, its images, CoreDNS.
	'hack/cluster/*'
	# The PromQL parser of Prometheus 2.42, Debian's, which runs the alerts
	# (make monitoring-check).
	test/monitoring
)

is_held() {
	local dir=$1 pattern
	for pattern in "${held[@]}"; do
		# shellcheck disable=SC2053 # a pattern, on purpose
		[[ $dir == $pattern ]] && return 0
	done
	return 1
}

config=.github/dependabot.yml
[[ -f $config ]] || { log "no $config"; exit 1; }

# The directories of the gomod entry: the "- /dir" lines under its
# directories:, as .github/dependabot.yml writes them, without the leading /.
mapfile -t listed < <(awk '
	/^- package-ecosystem:/ { gomod = ($3 == "gomod"); in_dirs = 0; next }
	gomod && /^  directories:/ { in_dirs = 1; next }
	gomod && in_dirs && /^  - / { dir = $2; sub(/^\//, "", dir); print (dir == "" ? "." : dir); next }
	/^  [a-z]/ { in_dirs = 0 }
' "$config" | LC_ALL=C sort -u)
((${#listed[@]} > 0)) || { log "$config: no directories under the gomod entry"; exit 1; }

# The modules' directories, as hack/tidy-check.sh finds them.
mapfile -t modules < <(git ls-files --cached --others --exclude-standard -- ':(glob)**/go.mod' |
	while read -r mod; do if [[ -f $mod ]]; then dirname "$mod"; fi; done | LC_ALL=C sort -u)

failed=0
for dir in "${modules[@]}"; do
	listed_here=false
	for l in "${listed[@]}"; do [[ $l == "$dir" ]] && listed_here=true; done
	if is_held "$dir"; then
		if $listed_here; then
			log "$dir is held at an upstream release (hack/dependabot-check.sh) and listed in $config: one or the other"
			failed=1
		fi
	elif ! $listed_here; then
		log "$dir/go.mod: not in $config's gomod directories: add /${dir#.} there, or, when a test needs it held at an upstream release, to held in hack/dependabot-check.sh"
		failed=1
	fi
done
for l in "${listed[@]}"; do
	if [[ ! -f $l/go.mod ]]; then
		log "$config lists /${l#.}, which has no go.mod"
		failed=1
	fi
done
((failed == 0)) || exit 1
log "${#modules[@]} modules: ${#listed[@]} updated weekly, $((${#modules[@]} - ${#listed[@]})) held"
