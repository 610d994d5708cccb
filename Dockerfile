# The webhook's image: a static binary on distroless, run as a non-root user.
# `make docker-build IMG=...` builds it; `make image` builds the same
# image without Docker (hack/image).

# Build the binary.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
# What `webhook version` and the metric flyte_mpi_webhook_build_info report:
# docker build --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD)
ARG VERSION=dev
ARG REVISION=

WORKDIR /workspace
# The modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download

# What ./cmd/webhook builds from; .dockerignore keeps out everything else.
COPY cmd/ cmd/
COPY internal/ internal/

# CGO_ENABLED=0: a static binary, which the distroless static image can run.
# GOARCH is left empty when TARGETARCH is, so that the builder's own is used.
# The flags are make image's (hack/image, whose test holds them equal).
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath \
    -ldflags="-s -w -X github.com/flyteorg/flyte-mpi-webhook/internal/version.Version=${VERSION} -X github.com/flyteorg/flyte-mpi-webhook/internal/version.Revision=${REVISION}" \
    -o webhook ./cmd/webhook

# Distroless: no shell, no package manager; nonroot: uid 65532.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/webhook .
# Numeric, so that the kubelet can check the pod's runAsNonRoot.
USER 65532:65532

ENTRYPOINT ["/webhook"]
