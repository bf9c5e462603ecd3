#!/usr/bin/env bash
# Runs Felix locally (see `make dev`).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "${ROOT}"
export KUBEBUILDER_ASSETS="$(hack/build-envtest.sh)"
exec go run ./cmd/felix-dev "$@"
