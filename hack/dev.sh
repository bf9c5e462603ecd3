#!/usr/bin/env bash
# Runs Felix locally (see `make dev`): API server, operator, broker processes.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "${ROOT}"
export KUBEBUILDER_ASSETS="$(hack/build-envtest.sh)"
go build -o bin/felix ./cmd/felix
exec go run ./cmd/felix-dev "$@"
