#!/usr/bin/env bash
# csi-sanity.sh [CSI-SANITY FLAGS...]: runs upstream's CSI conformance suite
# (csi-sanity from github.com/kubernetes-csi/csi-test/v5, pinned in lib.sh,
# built once into bin/k8s-node/csi/ and the tool cache) against
# felix-csi-hostpath in mode all, in a temporary directory. No cluster is
# needed; run as root, since the node tests mount. Exits with csi-sanity's
# status.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "${K8S_ROOT}"

SANITY="${CSI_BIN}/csi-sanity-${CSI_TEST_VERSION}"
if [[ ! -x "${SANITY}" ]]; then
  cache="${NODE_CACHE}/csi/csi-sanity-${CSI_TEST_VERSION}"
  if [[ ! -x "${cache}" ]]; then
    log "building csi-sanity ${CSI_TEST_VERSION}"
    tmp="$(mktemp -d)"
    GOBIN="${tmp}" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath \
      "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@${CSI_TEST_VERSION}"
    mkdir -p "$(dirname "${cache}")"
    mv "${tmp}/csi-sanity" "${cache}"
    rm -rf "${tmp}"
  fi
  mkdir -p "${CSI_BIN}"
  cp "${cache}" "${SANITY}"
fi

work="$(mktemp -d)"
pid=
cleanup() {
  if [[ -n "${pid}" ]]; then kill "${pid}" 2>/dev/null && wait "${pid}" 2>/dev/null || true; fi
  # Whatever a failed node test left mounted under the work directory.
  { findmnt -rn -o TARGET | grep -F "${work}/" | sort -r | while read -r m; do umount "${m}"; done; } || true
  rm -rf "${work}"
}
trap cleanup EXIT
go build -o "${work}/felix-csi-hostpath" ./cmd/felix-csi-hostpath
sock="${work}/kubelet/plugins/hostpath.csi.felix.dev/csi.sock"
"${work}/felix-csi-hostpath" --mode=all --node-id=sanity-node --kubelet-dir="${work}/kubelet" \
  --state-dir="${work}/state" 2>"${work}/driver.log" &
pid=$!
for _ in $(seq 100); do [[ -S "${sock}" ]] && break; sleep 0.1; done
[[ -S "${sock}" ]] || { cat "${work}/driver.log" >&2; die "the driver did not start"; }
status=0
"${SANITY}" --csi.endpoint="${sock}" --csi.mountdir="${work}/kubelet/mnt" \
  --csi.stagingdir="${work}/kubelet/stage" --csi.testvolumesize=1048576 "$@" || status=$?
(( status == 0 )) || { echo "driver log:" >&2; tail -50 "${work}/driver.log" >&2; }
exit "${status}"
