#!/usr/bin/env bash
# annotate.sh CHART.yaml VERSION IMAGE_REF CHANGELOG.md PLATFORM...: appends to
# the annotations of a copy of the chart's Chart.yaml those of Artifact Hub that
# change with each release, as make release packages it
# (https://artifacthub.io/docs/topics/annotations/helm/):
#   artifacthub.io/images      the image, IMAGE_REF (REPOSITORY:VERSION@sha256:...,
#                              make image's .ref), and its PLATFORMs;
#   artifacthub.io/changes     CHANGELOG.md's section ## [VERSION] (## [Unreleased]
#                              when it has none, as for make release-check's
#                              v0.0.0-check), each entry under its ### heading's kind;
#   artifacthub.io/prerelease  "true" when VERSION has a pre-release (-rc.1);
#   artifacthub.io/containsSecurityUpdates  "true" when the section has ### Security.
# What it writes depends on its arguments alone, so that make release stays
# reproducible. annotations: must be Chart.yaml's last key, and hold none of these yet.
set -euo pipefail
log() { echo "annotate.sh: $*" >&2; }
chart=${1:?Chart.yaml} version=${2:?VERSION} image=${3:?IMAGE_REF} changelog=${4:?CHANGELOG.md}
shift 4
(($# > 0)) || { log "no PLATFORM: want linux/amd64 ..."; exit 1; }
[[ $image =~ ^[^@]+:[^@:/]+@sha256:[0-9a-f]{64}$ ]] || { log "IMAGE_REF $image: want REPOSITORY:TAG@sha256:<64 hex>"; exit 1; }
last=$(grep -nE '^[A-Za-z]' "$chart" | tail -n 1)
[[ ${last#*:} == annotations:* ]] || { log "$chart: annotations: is not the last key (${last#*:}): what this appends would land in another"; exit 1; }
if grep -qE '^  artifacthub\.io/(images|changes|prerelease|containsSecurityUpdates):' "$chart"; then
	log "$chart: already holds a release's annotations"
	exit 1
fi

section=$version
if ! grep -qF "## [$version]" "$changelog"; then
	log "$changelog has no section ## [$version]: its changes are those of ## [Unreleased]"
	section=Unreleased
fi
# Each entry: "- text" and its lines indented by two, joined; its kind, the
# ### heading above it in lower case, one of the six of Keep a Changelog,
# which are Artifact Hub's. Printed as a YAML list, each description a
# double-quoted string.
changes=$(awk -v heading="## [$section]" '
	function flush() {
		if (text == "") return
		gsub(/\\/, "\\\\", text); gsub(/"/, "\\\"", text)
		printf "    - kind: %s\n      description: \"%s\"\n", kind, text
		text = ""
	}
	index($0, heading) == 1 { found = 1; next }
	!found { next }
	/^## / { exit }
	/^### / {
		flush()
		kind = tolower(substr($0, 5))
		if (kind !~ /^(added|changed|deprecated|removed|fixed|security)$/) {
			print "annotate.sh: " FILENAME ": ### " substr($0, 5) " is none of Added, Changed, Deprecated, Removed, Fixed, Security" > "/dev/stderr"
			failed = 1; exit 1
		}
		next
	}
	/^- / { flush(); text = substr($0, 3); next }
	/^  [^ ]/ && text != "" { line = $0; sub(/^ +/, "", line); text = text " " line; next }
	/^$/ { flush() }
	END { if (!failed) flush() }
' "$changelog")

prerelease=false
[[ $version == *-* ]] && prerelease=true
security=false
grep -q '^    - kind: security$' <<< "$changes" && security=true

{
	echo "  artifacthub.io/images: |"
	echo "    - name: flyte-mpi-webhook"
	echo "      image: $image"
	echo "      platforms:"
	for platform in "$@"; do echo "        - $platform"; done
	if [[ -n $changes ]]; then
		echo "  artifacthub.io/changes: |"
		echo "$changes"
	fi
	echo "  artifacthub.io/prerelease: \"$prerelease\""
	echo "  artifacthub.io/containsSecurityUpdates: \"$security\""
} >> "$chart"
