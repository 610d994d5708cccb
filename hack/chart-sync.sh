#!/usr/bin/env bash
# chart-sync.sh writes the admission policies' CEL, as config/ holds it, into
# the chart: for each policy, the spec after its matchConstraints (the
# matchConditions, variables, validations or mutations, and their comments)
# goes to charts/flyte-mpi-webhook/files/policy/, which the chart's
# templates/policy read with .Files.Get. The chart templates what Helm sets
# (names, labels, matchConstraints, the bindings); the CEL is config/'s.
# It also copies the alerts (config/prometheus/rules.yaml) and the Grafana
# dashboard (config/grafana) as they are into files/prometheus and
# files/grafana, where the PrometheusRule and the dashboard's ConfigMap read
# them and write the release's names in.
# `make chart-sync` runs it; with --check (make lint, make test-chart) it
# writes nothing and fails, with the diff, when the chart's copy differs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

chart=${CHART_DIR:-charts/flyte-mpi-webhook}
# source in config/ -> file under the chart's files/policy/
declare -A policies=(
	[config/policy/mutating-policy.yaml]=mutating-policy.yaml
	[config/policy/validating-policy.yaml]=validating-policy.yaml
	[config/policy-only/no-webhook.yaml]=no-webhook.yaml
)

# specAfterMatchConstraints prints the first document's spec from the line
# after its matchConstraints block to the document's end, two spaces less
# indented, as the chart's templates indent it again.
specAfterMatchConstraints() {
	awk -v source="$1" '
		BEGIN { print "# Written by make chart-sync from " source ": edit that file, not this one." }
		/^---/ { exit }
		state == 0 && /^  matchConstraints:/ { state = 1; next }
		state == 1 && /^    / { next }
		state == 1 { state = 2 }
		state == 2 { print substr($0, 3) }
		END { if (state != 2) { print "chart-sync: " source ": no spec.matchConstraints followed by more spec" > "/dev/stderr"; exit 1 } }
	' "$1"
}

# patchedMatchConditions prints the value of the patch of config/
# default-with-policy that adds the webhook's matchConditions, six spaces
# less indented.
patchedMatchConditions() {
	awk -v source="$1" '
		BEGIN { print "# Written by make chart-sync from " source ": edit that file, not this one." }
		/^      path: \/webhooks\/0\/matchConditions$/ { state = 1; next }
		state == 1 && /^      value:$/ { state = 2; next }
		state == 2 && /^      / { print substr($0, 7); found = 1; next }
		state == 2 { exit }
		END { if (!found) { print "chart-sync: " source ": no patch adding /webhooks/0/matchConditions" > "/dev/stderr"; exit 1 } }
	' "$1"
}

check=false
[[ ${1:-} == --check ]] && check=true
files=$chart/files
if $check; then
	files=$(mktemp -d)
	trap 'rm -rf "$files"' EXIT
fi
mkdir -p "$files/policy" "$files/prometheus" "$files/grafana"
for source in "${!policies[@]}"; do
	specAfterMatchConstraints "$source" >"$files/policy/${policies[$source]}"
done
patchedMatchConditions config/default-with-policy/kustomization.yaml >"$files/policy/left-to-the-webhook.yaml"
cp config/prometheus/rules.yaml "$files/prometheus/rules.yaml"
cp config/grafana/flyte-mpi-webhook.json "$files/grafana/flyte-mpi-webhook.json"
if $check; then
	for dir in policy prometheus grafana; do
		if ! diff -ru "$chart/files/$dir" "$files/$dir"; then
			echo "chart-sync: $chart/files/$dir is not config/'s (-chart +config/): run make chart-sync" >&2
			exit 1
		fi
	done
fi
