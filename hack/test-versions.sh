#!/usr/bin/env bash
# test-versions.sh runs, against kube-apiserver of each Kubernetes minor that
# platform teams run (TEST_VERSIONS, newest patch of each), what works there:
#   - the envtest suite (test/envtest): kubeflow.org/v1 and v2beta1, the
#     client-certificate specs included; the admission policies' specs only
#     where the v1 MutatingAdmissionPolicy is served (POLICY_FROM on);
#   - test/helm's install, upgrade from v0.1.0 and uninstall of the chart,
#     with Helm 3 and 4, in mode webhook; every mode from POLICY_FROM on.
# It builds each API server once (hack/envtest-assets.sh, cached), prints one
# table, writes it to bin/test-versions.md, and fails if any version failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

read -r -a versions <<<"${TEST_VERSIONS:-1.32.13 1.33.13 1.34.4 1.35.4 1.36.3 1.37.2}"
POLICY_FROM=${POLICY_FROM:-36}
GO=${GO:-go}
export MPIJOB_CRD_V1 MPIJOB_CRD_V2BETA1
: "${MPIJOB_CRD_V1:?run it with make test-versions, which finds the MPIJob CRDs}" "${MPIJOB_CRD_V2BETA1:?}"
logs=bin/test-versions
mkdir -p "$logs"

rows=() failed=0
for version in "${versions[@]}"; do
	minor=${version#*.}
	minor=${minor%%.*}
	start=$SECONDS
	if ! assets=$(ENVTEST_K8S_VERSION=$version hack/envtest-assets.sh); then
		rows+=("| $version | kube-apiserver not built | **failed** | $((SECONDS - start)) s |")
		failed=1
		continue
	fi
	envtest_args=() helm_run='^TestInstall$'
	ran="envtest v1, v2beta1 (client certificates, policies); Helm 3 and 4: every mode"
	if ((minor < POLICY_FROM)); then
		envtest_args=(-ginkgo.label-filter='!policy')
		helm_run='^TestInstall$/^(v1|v2beta1)$/^helm_[34]$/mode_webhook$'
		ran="envtest v1, v2beta1 (client certificates; no policy: not served); Helm 3 and 4: mode webhook"
	fi
	log="$logs/$version.log"
	echo "test-versions: Kubernetes $version: $ran (log: $log)" >&2
	result=passed
	{
		KUBEBUILDER_ASSETS=$assets $GO test -count=1 -v ./test/envtest/ "${envtest_args[@]}" &&
			KUBEBUILDER_ASSETS=$assets $GO -C test/helm test -count=1 -timeout 30m -run "$helm_run" .
	} >"$log" 2>&1 || { result="**failed**"; failed=1; }
	specs=$(grep -Eo 'Ran [0-9]+ of [0-9]+ Specs' "$log" | head -1)
	rows+=("| $version | $ran; ${specs:-no specs ran} | $result | $((SECONDS - start)) s |")
	echo "test-versions: Kubernetes $version $result in $((SECONDS - start)) s" >&2
done

table=$(
	echo "| Kubernetes | what ran | result | time |"
	echo "|---|---|---|---|"
	printf '%s\n' "${rows[@]}"
)
echo "$table" | tee bin/test-versions.md
echo "make test-versions on $(date -u +%Y-%m-%d) at $(git rev-parse --short HEAD)" >>bin/test-versions.md
exit "$failed"
