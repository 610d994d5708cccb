#!/usr/bin/env bash
# apt-install.sh PACKAGE... installs, with apt-get, the Debian packages named
# that are missing: a no-op when all are there. apt-get update runs only when
# an install fails for want of the package lists (a new machine has none).
# .ci/run and make test-cluster install what they need with it.
set -euo pipefail
packages=("$@")
log() { echo "apt-install: $(date -u +%T) $*" >&2; }
missing=()
for package in "${packages[@]}"; do
	[[ "$(dpkg-query -W -f '${Status}' "$package" 2> /dev/null)" == "install ok installed" ]] || missing+=("$package")
done
((${#missing[@]} == 0)) && exit 0
log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
	log "apt-get install failed: updating the package lists and trying again"
	apt-get update >&2
	apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi
log "installed ${missing[*]}"
