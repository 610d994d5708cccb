#!/usr/bin/env bash
# check.sh: a release, published and verified as the README says, against a
# registry of its own on loopback. make release-check runs it on the release
# it made (RELEASE_DIR, RELEASE_VERSION), with COSIGN and HELM built:
#
#  1. Debian's docker-registry (Distribution 2.8) serves plain HTTP on a free
#     port of 127.0.0.1, its storage in a temporary directory.
#  2. cosign generates two key pairs: the release's, and another.
#  3. make publish pushes the image (skopeo) and the chart (helm push) there,
#     and signs them, the SBOMs and SHA256SUMS with the release's key.
#  4. The SBOMs list exactly the Go modules that go list says ./cmd/webhook
#     compiles in, with their versions, and the image; their time is the
#     commit's and their namespace names the image (make release-sbom-check,
#     before, ran syft again for the same bytes); the attested ones are the
#     files. The chart's time in the registry is the commit's too.
#  5. Each command of the README's "With a key" block, run as its reader
#     runs it (the release's files and cosign.pub in the directory):
#       - passes for the release as published;
#       - fails, for the image, once another image is pushed under the same
#         tag (another digest), signed and attested with another key;
#       - passes again once the tag is back on the release's digest;
#       - fails, every one, when the reader's cosign.pub is the other key's.
#
# Everything it starts and writes goes when it ends: the registry by its
# PID, the directory, cosign's TUF cache (TUF_ROOT) in it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
: "${RELEASE_DIR:?the release directory make release wrote}" "${RELEASE_VERSION:?its version}"
: "${COSIGN:?bin/cosign}" "${MAKE:=make}"
COSIGN=$(realpath "$COSIGN") RELEASE_DIR=$(realpath "$RELEASE_DIR")
if [[ -n ${HELM:-} ]]; then HELM=$(realpath "$HELM"); fi
export COSIGN HELM

log() { echo "release-check: $(date -u +%T) $*" >&2; }
fail() {
	log "FAIL: $*"
	exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/release-check.XXXXXX")
registry_pid=
cleanup() {
	if [[ -n $registry_pid ]]; then
		kill "$registry_pid" 2> /dev/null || true
		wait "$registry_pid" 2> /dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
# cosign's cache of the sigstore trust root, never the machine's.
export TUF_ROOT=$work/tuf
# The keys' password: none.
export COSIGN_PASSWORD=

# 1. The registry.
listening() { (: <> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }
port=
for candidate in $(shuf -i 20000-29999 -n 50); do
	if ! listening "$candidate"; then
		port=$candidate
		break
	fi
done
[[ -n $port ]] || fail "no free port on 127.0.0.1 in 50 tries"
mkdir -p "$work/registry"
cat > "$work/registry.yml" << YAML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $work/registry}}
http: {addr: 127.0.0.1:$port}
YAML
docker-registry serve "$work/registry.yml" > "$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 100); do
	listening "$port" && break
	kill -0 "$registry_pid" 2> /dev/null || fail "docker-registry exited: $(cat "$work/registry.log")"
	sleep 0.1
done
listening "$port" || fail "docker-registry does not listen on 127.0.0.1:$port after 10 s"
registry=127.0.0.1:$port/flyteorg
log "docker-registry (PID $registry_pid) on 127.0.0.1:$port"

# 2. The keys.
(cd "$work" && "$COSIGN" generate-key-pair --output-key-prefix release > /dev/null 2>&1 &&
	"$COSIGN" generate-key-pair --output-key-prefix other > /dev/null 2>&1) || fail "cosign generate-key-pair"

# 3. Publish, as the release pipeline does, with the release's key in place of its identity.
start=$SECONDS
"$MAKE" --no-print-directory publish VERSION="$RELEASE_VERSION" DIST_DIR="$RELEASE_DIR" REGISTRY="$registry" \
	COSIGN_KEY="$work/release.key" PUBLISH_PLAIN_HTTP=true COSIGN="$COSIGN" ${HELM:+HELM="$HELM"} >&2
log "make publish took $((SECONDS - start))s"
# What make publish pushed and signed: image, image_digest, chart, chart_digest.
image='' image_digest='' chart='' chart_digest=''
# shellcheck source=/dev/null
source "$RELEASE_DIR/published.env"
image_ref=$(cat "$RELEASE_DIR"/flyte-mpi-webhook-"$RELEASE_VERSION"-image.ref)
[[ $image_digest == "${image_ref#*@}" ]] || fail "published $image_digest, but make image built ${image_ref#*@}"

# 4. The SBOMs: the Go modules compiled into /webhook, with their versions, and the image.
# The time of the release's SBOMs and chart: the commit's, as make release took it.
created=$(jq -nr --arg epoch "${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}" '$epoch | tonumber | todate')
for platform in linux/amd64 linux/arm64; do
	sbom=$RELEASE_DIR/flyte-mpi-webhook-$RELEASE_VERSION-${platform/\//-}.spdx.json
	want=$(GOOS=${platform%/*} GOARCH=${platform#*/} CGO_ENABLED=0 go list -deps \
		-f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}' ./cmd/webhook | LC_ALL=C sort -u)
	got=$(jq -r '.packages[] | select(.externalRefs[]?.referenceLocator | startswith("pkg:golang/"))
		| select(.name != "stdlib" and .name != "github.com/flyteorg/flyte-mpi-webhook") | "\(.name) \(.versionInfo)"' "$sbom" |
		LC_ALL=C sort -u)
	[[ $got == "$want" ]] || fail "$sbom: not the modules go list -deps ./cmd/webhook gives for $platform:
$(diff <(echo "$want") <(echo "$got"))"
	log "$(basename "$sbom"): the $(wc -l <<< "$want") modules ./cmd/webhook compiles in for $platform, each at its version"
	# The image: the platform's manifest, as the published index names it, and its layers.
	manifest=$(skopeo inspect --raw --tls-verify=false "docker://$image@$image_digest" | jq -r --arg os "${platform%/*}" \
		--arg arch "${platform#*/}" '.manifests[] | select(.platform.os == $os and .platform.architecture == $arch) | .digest')
	[[ -n $manifest ]] || fail "the index $image_digest has no $platform manifest"
	got=$(jq -r '.packages[] | select(.primaryPackagePurpose == "CONTAINER") | "sha256:\(.checksums[] | select(.algorithm == "SHA256") | .checksumValue)"' "$sbom")
	[[ $got == "$manifest" ]] || fail "$sbom: describes the image $got, not $platform's manifest $manifest"
	layers=$(skopeo inspect --config --tls-verify=false "docker://$image@$manifest" | jq -r '.rootfs.diff_ids[]' | LC_ALL=C sort)
	got=$(jq -r '.files[].comment | capture("layerID: (?<id>sha256:[0-9a-f]+)").id' "$sbom" | LC_ALL=C sort -u)
	[[ $got == "$layers" ]] || fail "$sbom: its files are in the layers $got, the image's are $layers"
	log "$(basename "$sbom"): the image $manifest, its layer $layers"
	# Reproducible (hack/syft/reproducible.jq): the commit's time; a namespace named by the manifest.
	got=$(jq -r '"\(.creationInfo.created) \(.documentNamespace)"' "$sbom")
	[[ $got == "$created "*"-${manifest/:/-}" ]] ||
		fail "$sbom: created and documentNamespace $got: want $created, and a namespace that ends -${manifest/:/-}"
	log "$(basename "$sbom"): created $created (SOURCE_DATE_EPOCH), its namespace ${got#* }"
done
# The chart as helm push wrote it: created, the archive's time (hack/helm/reproducible.sh), the commit's.
got=$(skopeo inspect --raw --tls-verify=false "docker://$chart@$chart_digest" |
	jq -r '.annotations["org.opencontainers.image.created"]')
[[ $got == "$created" ]] || fail "the chart $chart@$chart_digest: created $got, want $created (SOURCE_DATE_EPOCH)"
log "the chart $chart_digest: created $created (SOURCE_DATE_EPOCH)"
# The attestations hold the files, each signed with the release's key.
"$COSIGN" verify-attestation --key "$work/release.pub" --insecure-ignore-tlog=true --type spdxjson \
	"$image@$image_digest" > "$work/attestations" 2> "$work/out" || fail "cosign verify-attestation: $(cat "$work/out")"
attested=$(jq -cS '.payload | @base64d | fromjson | .predicate' "$work/attestations" | LC_ALL=C sort)
files=$(for sbom in "$RELEASE_DIR"/flyte-mpi-webhook-"$RELEASE_VERSION"-*.spdx.json; do jq -cS . "$sbom"; done | LC_ALL=C sort)
[[ $attested == "$files" ]] || fail "the SBOMs attested to $image@$image_digest are not the release's SBOM files"
log "the image's SPDX attestations are the release's $(wc -l <<< "$files") SBOM files"

# 5. The README's verification, as its reader runs it.
readme_block() {
	local heading=$1
	awk -v heading="$heading" '
		$0 == heading { found = 1; next }
		found && /^#/ { exit }
		found && /^```sh$/ { inside = 1; next }
		inside && /^```$/ { exit }
		inside { print }' README.md
}
block=$(readme_block "### With a key: a private mirror")
[[ -n $block ]] || fail "README.md has no \`\`\`sh block under \"### With a key: a private mirror\""
chart_version=${RELEASE_VERSION#v}
block=${block//<registry>/$registry}
block=${block//v0.1.0/$RELEASE_VERSION}
block=${block//0.1.0/$chart_version}
# One command a line, a trailing backslash joining lines.
mapfile -t commands < <(sed -e ':a' -e '/\\$/N; s/\\\n */ /; ta' <<< "$block")
reader=$work/reader
mkdir -p "$reader/bin"
ln -s "$(realpath "$COSIGN")" "$reader/bin/cosign"
for file in "$RELEASE_DIR"/*; do ln -s "$(realpath "$file")" "$reader/"; done
ln -sf "$work/release.pub" "$reader/cosign.pub"

# The registry speaks plain HTTP, which cosign (go-containerregistry) takes for 127.0.0.1.
run() { (cd "$reader" && PATH=$reader/bin:$PATH bash -euo pipefail -c "$1") > "$work/out" 2>&1; }
# expect WHEN TEXT: every command holding TEXT must fail, every other pass
# (TEXT empty: all pass).
expect() {
	local when=$1 failing=$2 command
	for command in "${commands[@]}"; do
		[[ -n $command ]] || continue
		if [[ -n $failing && $command == *"$failing"* ]]; then
			! run "$command" || fail "$when: passed, and must not: $command"
			# cosign's own refusal, not the registry's or the network's (as test/cluster/verify_test.go asks).
			grep -qE 'no matching (signatures|attestations)|failed to verify signature' "$work/out" ||
				fail "$when: failed, but not as a refusal: $command: $(tail -n 5 "$work/out")"
			log "$when: refused, as it must: $command: $(grep -m1 -i 'error' "$work/out")"
		else
			run "$command" || fail "$when: $command: $(tail -n 5 "$work/out")"
			log "$when: passed: $command"
		fi
	done
}
expect "as published" ""

skopeo copy --quiet --dest-tls-verify=false --override-os linux --override-arch arm64 \
	oci-archive:"$RELEASE_DIR/flyte-mpi-webhook-$RELEASE_VERSION-image.tar" docker://"$registry/flyte-mpi-webhook:$RELEASE_VERSION"
tampered=$(skopeo inspect --tls-verify=false --format '{{.Digest}}' docker://"$registry/flyte-mpi-webhook:$RELEASE_VERSION")
[[ $tampered != "$image_digest" ]] || fail "the tampered tag still names $image_digest"
"$COSIGN" sign --yes --key "$work/other.key" --use-signing-config=false --tlog-upload=false \
	"$registry/flyte-mpi-webhook@$tampered" > /dev/null 2>&1 || fail "cosign sign with the other key"
"$COSIGN" attest --yes --key "$work/other.key" --use-signing-config=false --tlog-upload=false \
	--type spdxjson --predicate "$RELEASE_DIR/flyte-mpi-webhook-$RELEASE_VERSION-linux-arm64.spdx.json" \
	"$registry/flyte-mpi-webhook@$tampered" > /dev/null 2>&1 || fail "cosign attest with the other key"
# The other key's signature is sound: only the key tells it from the release's.
"$COSIGN" verify --key "$work/other.pub" --insecure-ignore-tlog=true "$registry/flyte-mpi-webhook:$RELEASE_VERSION" > /dev/null 2>&1 ||
	fail "the other key's signature of $tampered does not verify with the other key"
expect "the tag on another digest ($tampered), signed with another key" " $registry/flyte-mpi-webhook:"

skopeo copy --quiet --all --preserve-digests --dest-tls-verify=false \
	oci-archive:"$RELEASE_DIR/flyte-mpi-webhook-$RELEASE_VERSION-image.tar" docker://"$registry/flyte-mpi-webhook:$RELEASE_VERSION"
expect "the tag back on the release's digest" ""

ln -sf "$work/other.pub" "$reader/cosign.pub"
expect "the reader's cosign.pub another key's" "cosign"
log "PASS: make publish, and the README's verification with a key, on 127.0.0.1:$port"
