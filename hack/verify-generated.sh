#!/usr/bin/env bash
# Fails when `make generate` would change any generated file (deepcopy code,
# CRDs, RBAC and the chart's copies of them), or when `go mod tidy` would
# change go.mod or go.sum (of the main module or of hack/natsbench).
# Compares file hashes before and after, so it works with uncommitted
# changes too; module files that tidy changed are put back as they were.
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

# go mod tidy, per module. -mod=mod lets tidy update the files; it reads the
# module cache and asks the module proxy only for what the cache lacks.
GO="${GO:-go}"
tidy_failed=0
for mod in . hack/natsbench; do
  [[ -f "${mod}/go.mod" ]] || continue
  keep="$(mktemp -d "${TMPDIR:-/tmp}/felix-verify.XXXXXX")"
  cp "${mod}/go.mod" "${keep}/go.mod"
  [[ -f "${mod}/go.sum" ]] && cp "${mod}/go.sum" "${keep}/go.sum"
  if ! (cd "${mod}" && GOFLAGS=-mod=mod "${GO}" mod tidy) >"${keep}/tidy.txt" 2>&1; then
    echo "verify: 'go mod tidy' failed in ${mod}:" >&2
    sed 's/^/    /' "${keep}/tidy.txt" >&2
    tidy_failed=1
  else
    for f in go.mod go.sum; do
      if [[ -f "${keep}/${f}" ]] && ! cmp -s "${keep}/${f}" "${mod}/${f}"; then
        echo "verify: 'go mod tidy' would change ${mod}/${f}; run it there and commit:" >&2
        diff -u "${keep}/${f}" "${mod}/${f}" | sed 's/^/    /' >&2 || true
        tidy_failed=1
      elif [[ ! -f "${keep}/${f}" && -f "${mod}/${f}" ]]; then
        echo "verify: 'go mod tidy' would create ${mod}/${f}; run it there and commit" >&2
        tidy_failed=1
        rm -f "${mod}/${f}"
      fi
    done
  fi
  cp "${keep}/go.mod" "${mod}/go.mod"
  [[ -f "${keep}/go.sum" ]] && cp "${keep}/go.sum" "${mod}/go.sum"
  rm -rf "${keep}"
done
if [[ ${tidy_failed} != 0 ]]; then
  exit 1
fi
echo "verify: go.mod and go.sum are tidy"
