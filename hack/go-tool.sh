#!/usr/bin/env bash
# go-tool.sh NAME PACKAGE VERSION: installs a pinned Go tool as bin/NAME-VERSION
# and prints its path. Cached by version, in bin/ and in a per-user cache
# outside the work tree, so fresh clones on the same machine reuse it.
set -euo pipefail
name="$1" pkg="$2" version="$3"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
out="${ROOT}/bin/${name}-${version}"
cache="${FELIX_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/felix-tools}/${name}-${version}"
if [[ -x "${out}" ]]; then echo "${out}"; exit 0; fi
mkdir -p "${ROOT}/bin" "$(dirname "${cache}")"
if [[ ! -x "${cache}" ]]; then
  echo "go-tool: building ${pkg}@${version}" >&2
  tmp="$(mktemp -d)"; trap 'rm -rf "${tmp}"' EXIT
  GOBIN="${tmp}" GOFLAGS=-mod=mod go install "${pkg}@${version}"
  cp "${tmp}/$(basename "${pkg}")" "${cache}"
fi
cp "${cache}" "${out}"
echo "${out}"
