#!/usr/bin/env bash
# Prints, as environment assignments, the node binaries that make test-cluster
# runs, building each from the Go module proxy on first use:
#   KUBELET_BIN, KUBE_CONTROLLER_MANAGER_BIN, KUBE_SCHEDULER_BIN, KUBECTL  (hack/cluster/k8s)
#   CLUSTER_IMAGE_BIN, PAUSE_BIN, KUBECTL_DELIVERY_BIN             (hack/cluster/images)
#   COREDNS_BIN, the cluster's DNS                                 (hack/cluster/dns)
# They are cached in $CLUSTER_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/cluster) under
# <name>-<version>/, so that only the first run on a machine pays for them.
# Progress goes to standard error; only the assignments go to standard output.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/cluster}

log() { echo "cluster-build: $(date -u +%T) $*" >&2; }
# shellcheck source=hack/build-cached.sh
source "$here/../build-cached.sh"

k8s=$(cd "$here/k8s" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=${k8s#v*.}
minor=${minor%%.*}
# The version the binaries report, as kube-apiserver's build (hack/envtest-assets.sh) sets it:
# the kubelet puts it in the Node's status.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"

# Static, as Kubernetes releases kube-apiserver, the scheduler, the controller-manager
# and kubectl (its hack/lib/golang.sh), and the kubelet too (what its
# KUBE_STATIC_OVERRIDES=kubelet does): built alike, the five and envtest's
# kube-apiserver (hack/envtest-assets.sh, the cluster's API server) compile each
# package they share once. kubectl must be: the launcher's init image
# (kubectl-delivery) carries it into the job's image.
k8s_bin() { CGO_ENABLED=0 build_cached "$here/k8s" "k8s.io/kubernetes/cmd/$1" "$cache/$1-$k8s-static/$1" -trimpath -ldflags "$ldflags"; }
kubelet=$(k8s_bin kubelet)
scheduler=$(k8s_bin kube-scheduler)
controller=$(k8s_bin kube-controller-manager)
kubectl=$(k8s_bin kubectl)
# The images' programs are static: they run in images with no libc.
images_key=$(cd "$here/images" && { go env GOVERSION; sha256sum go.mod go.sum ./*.go ./*/*.go; } | sha256sum | cut -c1-12)
images_bin() { CGO_ENABLED=0 build_cached "$here/images" "./$1" "$cache/images-$images_key/$2" -trimpath -ldflags "-s -w"; }
image=$(images_bin . cluster-image)
pause=$(images_bin pause pause)
delivery=$(images_bin kubectl-delivery kubectl-delivery)
# The cluster's DNS: CoreDNS with the plugins it needs (hack/cluster/dns/main.go).
coredns_version=$(cd "$here/dns" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
dns_key=$(cd "$here/dns" && { go env GOVERSION; sha256sum go.mod go.sum main.go; } | sha256sum | cut -c1-12)
coredns=$(build_cached "$here/dns" . "$cache/coredns-$coredns_version-$dns_key/coredns" -trimpath -ldflags "-s -w")
echo "KUBELET_BIN=$kubelet"
echo "KUBE_SCHEDULER_BIN=$scheduler"
echo "KUBE_CONTROLLER_MANAGER_BIN=$controller"
echo "KUBECTL=$kubectl"
echo "CLUSTER_IMAGE_BIN=$image"
echo "PAUSE_BIN=$pause"
echo "KUBECTL_DELIVERY_BIN=$delivery"
echo "COREDNS_BIN=$coredns"
