#!/usr/bin/env bash
# containerd-check.sh IMAGE_TAR REF VERSION imports the image tarball into a
# containerd of its own, as a node does with `ctr -n k8s.io images import`,
# and runs it with runc: `/webhook version` must print VERSION as user
# 65532, and /bin/sh must not exist. The containerd runs in a temporary
# directory on a socket there, with the CRI plugin off, and is stopped, its
# mounts gone and its directory removed, whatever happens.
set -euo pipefail
tar=$(realpath "$1") ref=$2 version=$3

log() { echo "containerd-check: $*" >&2; }
for tool in containerd ctr runc; do
	command -v "$tool" >/dev/null || { log "no $tool; apt-get install -y containerd"; exit 1; }
done

dir=$(mktemp -d /tmp/containerd-check.XXXXXX)
containerd_pid=
cleanup() {
	set +e
	if [[ -n $containerd_pid ]]; then
		kill "$containerd_pid" 2>/dev/null || true
		wait "$containerd_pid" 2>/dev/null || true
	fi
	# Snapshots a container left mounted, deepest first.
	grep -o " $dir/[^ ]*" /proc/mounts | sort -r | while read -r mount; do umount "$mount"; done
	rm -rf "$dir"
}
trap cleanup EXIT

cat >"$dir/config.toml" <<EOF
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$dir/containerd.sock"
EOF
containerd --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
containerd_pid=$!
ctr=(ctr --address "$dir/containerd.sock" --namespace k8s.io)
deadline=$((SECONDS + 30))
until "${ctr[@]}" version >/dev/null 2>&1; do
	if ((SECONDS > deadline)) || ! kill -0 "$containerd_pid" 2>/dev/null; then
		log "containerd did not start:"; cat "$dir/containerd.log" >&2; exit 1
	fi
	sleep 0.2
done

"${ctr[@]}" images import "$tar" >&2
"${ctr[@]}" images ls -q | grep -qx "$ref" || { log "ctr import did not name the image $ref"; "${ctr[@]}" images ls >&2; exit 1; }

# The user runc runs the process as: the runtime spec containerd makes from
# the image's config.
"${ctr[@]}" containers create "$ref" user-check >/dev/null
user=$("${ctr[@]}" containers info user-check | tr -d ' \n' | grep -o '"user":{"uid":[0-9]*,"gid":[0-9]*' || true)
"${ctr[@]}" containers delete user-check
[[ $user == '"user":{"uid":65532,"gid":65532' ]] || { log "the container's process user is ${user:-none}, want uid and gid 65532"; exit 1; }
log "ctr containers create $ref: process user 65532:65532"

out=$("${ctr[@]}" run --rm "$ref" version-check /webhook version)
[[ $out == "flyte-mpi-webhook $version "* ]] || { log "/webhook version printed \"$out\", want flyte-mpi-webhook $version"; exit 1; }
log "ctr run $ref /webhook version: $out"

if "${ctr[@]}" run --rm "$ref" shell-check /bin/sh -c true >"$dir/shell.log" 2>&1; then
	log "/bin/sh ran in $ref; want no shell"; exit 1
fi
grep -q 'no such file or directory' "$dir/shell.log" || { log "/bin/sh failed otherwise than missing:"; cat "$dir/shell.log" >&2; exit 1; }
log "ctr run $ref /bin/sh: no such file, as wanted"
