#!/usr/bin/env bash
# e2e.sh: the end-to-end suite on a real node (test/k8s, docs/real-node.md).
# Starts the node if it is not running (hack/k8s/up.sh, which builds what is
# missing), builds the Felix image with the chart's appVersion as its tag and
# imports it, gives the brokers storage, removes what an earlier run left
# (the helm release, the suite's namespace) and runs `go test ./test/k8s`.
#
# Storage: the felix-hostpath StorageClass of our CSI driver when it is
# deployed on the node (deployed here when its builds are cached, or with
# FELIX_K8S_CSI=1); otherwise local PersistentVolumes (class
# felix-local, no provisioner) over directories in .felix-k8s/volumes/,
# made fresh for every run.
#
#   hack/k8s/e2e.sh [go test flags...]       e.g. -run 'TestRealNode/HelmInstall'
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "${K8S_ROOT}"

export KUBECONFIG="${STATE}/kubeconfig"
kubectl() { "${KUBE_BIN}/kubectl" "$@"; }

if ! { [[ -s "${KUBECONFIG}" ]] && kubectl get --raw /readyz >/dev/null 2>&1; }; then
  hack/k8s/up.sh
fi

APP_VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/felix/Chart.yaml)"
[[ -n "${APP_VERSION}" ]] || die "no appVersion in charts/felix/Chart.yaml"
IMG="felix:${APP_VERSION}"
log "building ${IMG} (BASE=scratch) and importing it into the node"
VERSION="${APP_VERSION}" BASE=scratch hack/docker-build.sh "${IMG}" >/dev/null
# config/samples name felix:dev: the same image under that tag too.
docker tag "${IMG}" felix:dev
hack/k8s/import-image.sh "${IMG}" felix:dev

log "removing what an earlier run left"
helm="${FELIX_HELM:-$(hack/go-tool.sh helm helm.sh/helm/v3/cmd/helm "${HELM_VERSION:-v3.22.0}")}"
# The suite's namespace first, while the operator runs: a FelixStream's
# finalizer is removed by the operator (docs/operator.md, "Deleting a
# stream"). Without an operator the finalizers are dropped by hand.
delete_ns() {
  if ! kubectl delete namespace "$1" --ignore-not-found --wait=true --timeout=180s >/dev/null; then
    kubectl -n "$1" get felixstreams -o name 2>/dev/null |
      xargs -r -I{} "${KUBE_BIN}/kubectl" -n "$1" patch {} --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
    kubectl delete namespace "$1" --ignore-not-found --wait=true --timeout=180s >/dev/null
  fi
}
delete_ns felix-e2e
delete_ns felix-kustomize
delete_ns felix-samples
# What a kubectl apply -k install (the suite's first step) left.
if kubectl -n felix-system get deployment felix-operator >/dev/null 2>&1; then
  kubectl delete -k config/default --ignore-not-found --wait=true --timeout=180s >/dev/null
fi
KUBECONFIG="${KUBECONFIG}" "${helm}" uninstall felix --namespace felix-system --wait >/dev/null 2>&1 || true

# The CSI driver (real PVC provisioning and VolumeSnapshots) when its
# sidecars are built: FELIX_K8S_CSI=1 deploys it (building them if needed),
# 0 never, auto (default) when they are cached.
csi="${FELIX_K8S_CSI:-auto}"
if [[ "${csi}" == "auto" ]]; then
  if csi_builds_cached; then csi=1; else csi=0; fi
fi
if [[ "${csi}" == "1" ]] && ! kubectl get storageclass felix-hostpath >/dev/null 2>&1; then
  hack/k8s/csi-deploy.sh
fi

storage_class=""
if kubectl get storageclass felix-hostpath >/dev/null 2>&1; then
  storage_class=felix-hostpath
else
  storage_class=felix-local
  log "no CSI driver on the node: local PersistentVolumes (class ${storage_class})"
  kubectl delete pv -l felix.dev/e2e-volume --ignore-not-found --wait=true --timeout=120s >/dev/null
  rm -rf "${STATE}/volumes"
  kubectl apply -f - >/dev/null <<EOF2
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: ${storage_class}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF2
  node="$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')"
  for i in $(seq 0 7); do
    dir="${STATE}/volumes/pv-${i}"
    # Brokers run as uid/gid 65532 and local volumes get no fsGroup chown.
    mkdir -p "${dir}" && chown 65532:65532 "${dir}" && chmod 0770 "${dir}"
    kubectl apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: PersistentVolume
metadata:
  name: felix-e2e-pv-${i}
  labels: {felix.dev/e2e-volume: "true"}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ${storage_class}
  local: {path: ${dir}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [${node}]}
EOF2
  done
fi

log "go test ./test/k8s (storage class ${storage_class})"
FELIX_K8S_KUBECONFIG="${KUBECONFIG}" FELIX_K8S_KUBECTL="${KUBE_BIN}/kubectl" FELIX_HELM="${helm}" \
FELIX_K8S_IMAGE="${IMG}" FELIX_K8S_STORAGE_CLASS="${storage_class}" \
FELIX_K8S_APISERVER_PORT="${APISERVER_PORT:-16443}" FELIX_K8S_CRICTL="${CRICTL}" FELIX_K8S_CRI_SOCK="${STATE}/run/containerd.sock" \
  go test ./test/k8s -count=1 -v -timeout 40m "$@"
