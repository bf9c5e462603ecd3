#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver and etcd) from pinned Go
# modules into bin/k8s/<version>/, so tests run against a real API server
# without downloading prebuilt binaries.
#
#   KUBE_VERSION   k8s.io/kubernetes release      (default v1.37.2)
#   ETCD_VERSION   go.etcd.io/etcd/server/v3      (default v3.7.3)
#
# The result is cached by version: a second run with the same versions is
# instant. k8s.io/kubernetes replaces every staging module with a relative
# path, which a consumer cannot use, so this script writes a throwaway
# module that replaces each staging module with its published v0 twin.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${ROOT}/bin/k8s/${KUBE_VERSION}-etcd${ETCD_VERSION}"
# Keep a copy outside the work tree too, so a fresh clone on the same machine
# (CI) reuses it.
CACHE="${FELIX_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/felix-tools}/k8s/${KUBE_VERSION}-etcd${ETCD_VERSION}"

# versioned BIN: BIN is a kube-apiserver that reports KUBE_VERSION. One
# built before the version was stamped reports v0.0.0-master, which charts
# with a kubeVersion constraint (ours) refuse: it is relinked.
versioned() { [[ "$("$1" --version 2>/dev/null)" == "Kubernetes ${KUBE_VERSION}" ]]; }

if [[ -x "${OUT}/kube-apiserver" && -x "${OUT}/etcd" ]] && versioned "${OUT}/kube-apiserver"; then
  echo "${OUT}"; exit 0
fi
mkdir -p "${OUT}"
if [[ -x "${CACHE}/kube-apiserver" && -x "${CACHE}/etcd" ]] && versioned "${CACHE}/kube-apiserver"; then
  cp "${CACHE}/kube-apiserver" "${CACHE}/etcd" "${OUT}/"
  echo "${OUT}"; exit 0
fi

STAGING_VERSION="v0.${KUBE_VERSION#v1.}"
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

log() { echo "build-envtest: $*" >&2; }

log "resolving k8s.io/kubernetes@${KUBE_VERSION} (staging modules at ${STAGING_VERSION})"
MODFILE="$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
[[ -f "${MODFILE}" ]] || { log "cannot find go.mod of k8s.io/kubernetes@${KUBE_VERSION}"; exit 1; }

cd "${WORK}"
cat > go.mod <<MOD
module felix.dev/envtest-binaries

go 1.26
MOD
# Every "k8s.io/x => ./staging/src/k8s.io/x" line becomes "k8s.io/x => k8s.io/x vSTAGING".
grep -E '=> \./staging/src/' "${MODFILE}" | awk -v v="${STAGING_VERSION}" '{print "replace " $1 " => " $1 " " v}' >> go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
log "fetching modules"
go get "k8s.io/kubernetes@${KUBE_VERSION}" >&2
go mod tidy >&2 2>/dev/null || true

log "building kube-apiserver ${KUBE_VERSION} (about 11 minutes cold on 2 cores)"
start=$(date +%s)
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
v=k8s.io/component-base/version
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-X ${v}.gitVersion=${KUBE_VERSION} -X ${v}.gitMajor=1 -X ${v}.gitMinor=${minor} -X ${v}.gitTreeState=clean" \
  -o "${OUT}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
versioned "${OUT}/kube-apiserver" || { log "the kube-apiserver built does not report ${KUBE_VERSION}"; exit 1; }
log "kube-apiserver built in $(( $(date +%s) - start ))s"

# etcd builds in its own module so its dependency versions are its own.
if [[ -x "${CACHE}/etcd" ]]; then
  cp "${CACHE}/etcd" "${OUT}/etcd.tmp" && mv "${OUT}/etcd.tmp" "${OUT}/etcd"
else
  mkdir -p "${WORK}/etcd" && cd "${WORK}/etcd"
  cat > go.mod <<MOD
module felix.dev/envtest-etcd

go 1.26
MOD
  log "building etcd ${ETCD_VERSION}"
  go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
  start=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -o "${OUT}/etcd" go.etcd.io/etcd/server/v3
  log "etcd built in $(( $(date +%s) - start ))s"
fi

# Into the cache by rename: tests may be running the cached binaries.
mkdir -p "${CACHE}"
for f in kube-apiserver etcd; do
  cp "${OUT}/${f}" "${CACHE}/.${f}.$$" && mv "${CACHE}/.${f}.$$" "${CACHE}/${f}"
done
echo "${OUT}"
