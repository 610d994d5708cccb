#!/usr/bin/env bash
# Installs, with apt-get, the Debian packages make test-cluster's node needs
# and that are missing: a no-op when all are there. apt-get update runs only
# when an install fails for want of the package lists.
set -euo pipefail
packages=(containerd runc containernetworking-plugins debootstrap iproute2 iptables openssl util-linux)
log() { echo "packages: $(date -u +%T) $*" >&2; }
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
