#!/usr/bin/env bash
# build-felix.sh OUT: builds the felix binary the image ships, static
# (CGO_ENABLED=0, linux) and stamped with VERSION and COMMIT from the
# environment. The Dockerfile's build stage and hack/docker-build.sh (the
# path for machines that cannot pull a Go builder image) both call it, so
# both images carry a binary built the same way.
set -euo pipefail
OUT="${1:?usage: build-felix.sh OUT}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="${VERSION:-dev}"
COMMIT="${COMMIT:-}"
cd "${ROOT}"
CGO_ENABLED=0 GOOS=linux GOFLAGS=-buildvcs=false go build -trimpath \
  -ldflags "-s -w -X felix.dev/felix/internal/version.Version=${VERSION} -X felix.dev/felix/internal/version.Commit=${COMMIT}" \
  -o "${OUT}" ./cmd/felix
