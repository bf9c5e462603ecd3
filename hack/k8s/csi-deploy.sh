#!/usr/bin/env bash
# csi-deploy.sh: deploys the CSI hostpath driver (docs/csi-hostpath.md) on
# the running real node (make k8s-up): builds it and its sidecars
# (hack/k8s/build.sh csi), imports their images into the node's containerd,
# installs the VolumeSnapshot CRDs and applies hack/k8s/csi/, then waits for
# the controller, the snapshot-controller and the node plugin, and for the
# kubelet to have registered the driver. Idempotent.
#
# FELIX_K8S_NO_BUILD=1 skips the build (the images must exist).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "${K8S_ROOT}"

SOCK="${STATE}/run/containerd.sock"
KUBECTL="${KUBE_BIN}/kubectl"
export KUBECONFIG="${STATE}/kubeconfig"
NODE_NAME="${NODE_NAME:-felix-node}"
CSI_STATE="${STATE}/csi-hostpath"   # volumes/ and snapshots/ of the driver
DRIVER=hostpath.csi.felix.dev
[[ -S "${SOCK}" && -s "${KUBECONFIG}" ]] || die "the real node is not running (make k8s-up)"

[[ -n "${FELIX_K8S_NO_BUILD:-}" ]] || hack/k8s/build.sh csi

# The driver's image is rebuilt with the same tag as the tree changes, so it
# is always imported; the sidecars' only when containerd lacks them.
import() {
  local name="$1" force="${2:-}" tar
  tar="${IMAGES}/$(tr '/:' '__' <<<"${name}").tar"
  [[ -s "${tar}" ]] || die "${tar} is missing (hack/k8s/build.sh csi)"
  if [[ -z "${force}" ]] && ctr --address "${SOCK}" -n k8s.io images ls -q | grep -qxF "${name}"; then return 0; fi
  log "importing ${name}"
  ctr --address "${SOCK}" -n k8s.io images import "${tar}" >/dev/null
}
import "${CSI_HOSTPATH_IMAGE}" force
import "${CSI_PROVISIONER_IMAGE}"
import "${CSI_SNAPSHOTTER_IMAGE}"
import "${SNAPSHOT_CONTROLLER_IMAGE}"

log "installing the VolumeSnapshot CRDs (external-snapshotter client/v8 ${CSI_SNAPSHOTTER_VERSION})"
"${KUBECTL}" apply --server-side -f "${CSI_BIN}/snapshot-crds-${CSI_SNAPSHOTTER_VERSION}.yaml" >/dev/null
"${KUBECTL}" wait --for condition=established --timeout=60s \
  crd/volumesnapshotclasses.snapshot.storage.k8s.io crd/volumesnapshotcontents.snapshot.storage.k8s.io \
  crd/volumesnapshots.snapshot.storage.k8s.io >/dev/null

log "applying hack/k8s/csi/"
mkdir -p "${CSI_STATE}"
for f in namespace rbac csidriver controller node classes; do
  echo "---"
  sed -e "s|@CSI_HOSTPATH_IMAGE@|${CSI_HOSTPATH_IMAGE}|g" \
      -e "s|@CSI_PROVISIONER_IMAGE@|${CSI_PROVISIONER_IMAGE}|g" \
      -e "s|@CSI_SNAPSHOTTER_IMAGE@|${CSI_SNAPSHOTTER_IMAGE}|g" \
      -e "s|@SNAPSHOT_CONTROLLER_IMAGE@|${SNAPSHOT_CONTROLLER_IMAGE}|g" \
      -e "s|@KUBELET_DIR@|${STATE}/kubelet|g" -e "s|@STATE_DIR@|${CSI_STATE}|g" \
      "hack/k8s/csi/${f}.yaml"
done | "${KUBECTL}" apply -f - >/dev/null

# A rebuilt driver image keeps its tag: restart the driver's pods on it.
"${KUBECTL}" -n felix-csi rollout restart statefulset/csi-controller daemonset/csi-node >/dev/null
for w in statefulset/csi-controller deployment/snapshot-controller daemonset/csi-node; do
  "${KUBECTL}" -n felix-csi rollout status "${w}" --timeout=180s >&2
done
log "waiting for the kubelet to register ${DRIVER}"
for _ in $(seq 60); do
  if "${KUBECTL}" get csinode "${NODE_NAME}" -o 'jsonpath={.spec.drivers[*].name}' 2>/dev/null | tr ' ' '\n' | grep -qxF "${DRIVER}"; then
    log "${DRIVER} is registered on ${NODE_NAME}; StorageClass and VolumeSnapshotClass felix-hostpath are the defaults"
    exit 0
  fi
  sleep 2
done
die "the kubelet did not register ${DRIVER} (kubectl -n felix-csi logs ds/csi-node; ${STATE}/logs/kubelet.log)"
