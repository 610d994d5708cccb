#!/usr/bin/env bash
# Prints the MPI operators' controllers that the end-to-end suite (test/e2e)
# runs, building them on first use, as environment assignments:
#   MPI_OPERATOR_BIN=<path>        mpi-operator (kubeflow.org/v2beta1)
#   TRAINING_OPERATOR_BIN=<path>   training-operator v1.8 (kubeflow.org/v1)
#   TRAINING_OPERATOR_V1_9_BIN=<path>   training-operator v1.9, the newest that
#                                  serves kubeflow.org/v1 MPIJobs
# Each is built from the Go module proxy with its own tools module in
# hack/e2e/<dir>, so that its dependencies never enter the webhook's go.mod,
# and cached in $E2E_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/e2e)
# under <name>-<version>/, so that any later run reuses it.
#
# MPI_OPERATOR_VERSION, TRAINING_OPERATOR_VERSION and TRAINING_OPERATOR_V1_9_VERSION, when set, must match the
# versions the tools modules pin: the Makefile sets them to the versions whose
# CRDs the suite installs, so that a CRD never meets another version's controller.
# Progress goes to standard error; only the assignments go to standard output.
set -euo pipefail
shopt -s inherit_errexit # build runs in $(...): let a failed step there fail it

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/e2e}

log() { echo "e2e-operators: $*" >&2; }
# shellcheck source=hack/build-cached.sh
source "$here/build-cached.sh"

# build NAME DIR MODULE PACKAGE WANT_VERSION prints the path of NAME's binary,
# building PACKAGE with the tools module hack/e2e/DIR when it is not cached.
build() {
	local name=$1 dir=$2 module=$3 package=$4 want=$5
	local version
	version=$(cd "$here/e2e/$dir" && go list -m -f '{{.Version}}' "$module")
	if [[ -n "$want" && "$want" != "$version" ]]; then
		log "hack/e2e/$dir builds $module $version, but $want was asked for: update hack/e2e/$dir/go.mod"
		return 1
	fi
	build_cached "$here/e2e/$dir" "$package" "$cache/$name-$version/$name" -trimpath -ldflags "-s -w"
}

mpi=$(build mpi-operator mpi-operator github.com/kubeflow/mpi-operator \
	github.com/kubeflow/mpi-operator/cmd/mpi-operator "${MPI_OPERATOR_VERSION:-}")
training=$(build training-operator training-operator github.com/kubeflow/training-operator \
	github.com/kubeflow/training-operator/cmd/training-operator.v1 "${TRAINING_OPERATOR_VERSION:-}")
training19=$(build training-operator training-operator-v1.9 github.com/kubeflow/training-operator \
	github.com/kubeflow/training-operator/cmd/training-operator.v1 "${TRAINING_OPERATOR_V1_9_VERSION:-}")
echo "MPI_OPERATOR_BIN=$mpi"
echo "TRAINING_OPERATOR_BIN=$training"
echo "TRAINING_OPERATOR_V1_9_BIN=$training19"
