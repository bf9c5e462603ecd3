#!/usr/bin/env bash
# docker-build.sh IMAGE: builds the felix image from a host-built static
# binary. BASE=scratch builds without pulling anything.
set -euo pipefail
IMG="${1:-felix:dev}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CTX="$(mktemp -d)"; trap 'rm -rf "${CTX}"' EXIT
VERSION="${VERSION:-$(git -C "${ROOT}" describe --tags --always --dirty 2>/dev/null || echo dev)}"
COMMIT="$(git -C "${ROOT}" rev-parse --short HEAD 2>/dev/null || true)"
(cd "${ROOT}" && CGO_ENABLED=0 GOOS=linux go build -trimpath \
  -ldflags "-s -w -X felix.dev/felix/internal/version.Version=${VERSION} -X felix.dev/felix/internal/version.Commit=${COMMIT}" \
  -o "${CTX}/felix" ./cmd/felix)
cp "${ROOT}/Dockerfile" "${CTX}/Dockerfile"
args=()
[[ -n "${BASE:-}" ]] && args+=(--build-arg "BASE=${BASE}")
docker build "${args[@]}" -t "${IMG}" "${CTX}"
