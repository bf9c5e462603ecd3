#!/usr/bin/env bash
# Fails when `make generate` would change any generated file: deepcopy code,
# CRDs, RBAC and the chart's copies of them. Compares file hashes before and
# after regenerating, so it works with uncommitted changes too.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "${ROOT}"
paths=(api/v1alpha1/zz_generated.deepcopy.go config/crd/bases config/rbac/role.yaml charts/felix/crds charts/felix/files)
snapshot() { find "${paths[@]}" -type f -print0 | sort -z | xargs -0 sha256sum; }
before="$(snapshot)"
make -s generate >/dev/null
after="$(snapshot)"
if [[ "${before}" != "${after}" ]]; then
  echo "verify: generated files drifted from the kubebuilder markers; run 'make generate' and commit:" >&2
  diff <(echo "${before}") <(echo "${after}") >&2 || true
  exit 1
fi
echo "verify: generated files match the markers"
