#!/usr/bin/env bash
# Prints the directory that holds kube-apiserver and etcd for envtest
# (KUBEBUILDER_ASSETS), obtaining them on first use. In order:
#   1. $KUBEBUILDER_ASSETS, when set;
#   2. setup-envtest's own cache, when it already holds this version;
#   3. setup-envtest, which downloads them (needs the internet);
#   4. a build from the Go module proxy, with the tools module in hack/envtest,
#      into setup-envtest's cache, so that any later run reuses it.
# Progress goes to standard error; only the directory goes to standard output.
set -euo pipefail

K8S_VERSION=${ENVTEST_K8S_VERSION:-1.37.2}
SETUP_ENVTEST_VERSION=${SETUP_ENVTEST_VERSION:-v0.25.1}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "envtest-assets: $*" >&2; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
	echo "$KUBEBUILDER_ASSETS"
	exit 0
fi

store=${ENVTEST_STORE:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}
dir="$store/k8s/$K8S_VERSION-$(go env GOOS)-$(go env GOARCH)"
have() { [[ -x "$dir/kube-apiserver" && -x "$dir/etcd" ]]; }

if have; then
	echo "$dir"
	exit 0
fi

log "kube-apiserver and etcd $K8S_VERSION are not in $store; asking setup-envtest"
if path=$(timeout 120 go run "sigs.k8s.io/controller-runtime/tools/setup-envtest@$SETUP_ENVTEST_VERSION" \
	use "$K8S_VERSION" --bin-dir "$store" -p path 2>/dev/null) && [[ -x "$path/kube-apiserver" ]]; then
	echo "$path"
	exit 0
fi

# kube-apiserver comes from hack/envtest for the newest version, and from
# hack/envtest/releases/vVERSION for each older one that make test-versions runs
# (hack/envtest/new-release.sh writes such a module); etcd from hack/envtest.
pinned=$(cd "$here/envtest" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
apiserver_module="$here/envtest"
if [[ "$pinned" != "v$K8S_VERSION" ]]; then
	apiserver_module="$here/envtest/releases/v$K8S_VERSION"
	if [[ ! -f "$apiserver_module/go.mod" ]]; then
		log "hack/envtest builds k8s.io/kubernetes $pinned, and hack/envtest/releases has no v$K8S_VERSION:"
		log "set ENVTEST_K8S_VERSION=${pinned#v}, or one of: $(cd "$here/envtest/releases" && echo v*), or add one with hack/envtest/new-release.sh $K8S_VERSION"
		exit 1
	fi
fi
log "setup-envtest could not download them (no internet?); building them from the Go module proxy"
log "this happens once and takes 4 to 12 minutes on 2 cores; the binaries are cached in $dir"
minor=${K8S_VERSION#*.}
minor=${minor%%.*}
# Static, as Kubernetes releases kube-apiserver and etcd theirs: hack/cluster/build.sh
# builds the node binaries of the same release so, and reuses every package compiled here.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
tmp=$(mktemp -d)
# Report every 30 s, so that a long first build never looks hung.
(while sleep 30; do log "... still building"; done) &
ticker=$!
trap 'kill $ticker 2>/dev/null; rm -rf "$tmp"' EXIT
(
	start=$SECONDS
	log "[1/2] go build k8s.io/kubernetes/cmd/kube-apiserver (v$K8S_VERSION)"
	CGO_ENABLED=0 go -C "$apiserver_module" build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
	log "[1/2] done in $((SECONDS - start))s"
	start=$SECONDS
	log "[2/2] go build etcd"
	CGO_ENABLED=0 go -C "$here/envtest" build -trimpath -ldflags "-s -w" -o "$tmp/etcd" ./etcd
	log "[2/2] done in $((SECONDS - start))s"
) >&2
mkdir -p "$dir"
mv "$tmp/kube-apiserver" "$tmp/etcd" "$dir/"
"$dir/kube-apiserver" --version >&2
echo "$dir"
