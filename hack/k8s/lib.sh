# Sourced by hack/k8s/*.sh: every version the real-node cluster uses, pinned.
# The Kubernetes and etcd versions come from the Makefile (exported) and
# default to the same values as hack/build-envtest.sh.

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"          # k8s.io/kubernetes: kube-apiserver and every node component
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"           # go.etcd.io/etcd/server/v3
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.10.0}"  # github.com/containernetworking/plugins
CRI_TOOLS_VERSION="${CRI_TOOLS_VERSION:-v1.37.0}"      # sigs.k8s.io/cri-tools (crictl)
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"          # github.com/coredns/coredns
# The pause image is ours (hack/k8s/pause); bump the tag when main.go changes.
PAUSE_VERSION="${PAUSE_VERSION:-1}"
PAUSE_IMAGE="felix.local/pause:${PAUSE_VERSION}"
COREDNS_IMAGE="felix.local/coredns:${COREDNS_VERSION}"
# CSI (hack/k8s/build.sh csi, hack/k8s/csi/): the sidecars and the snapshot
# CRDs come from these upstream modules; the driver is ours
# (cmd/felix-csi-hostpath); bump its tag when internal/csihostpath changes.
CSI_PROVISIONER_VERSION="${CSI_PROVISIONER_VERSION:-v6.4.0}"   # github.com/kubernetes-csi/external-provisioner/v6
CSI_SNAPSHOTTER_VERSION="${CSI_SNAPSHOTTER_VERSION:-v8.7.0}"   # github.com/kubernetes-csi/external-snapshotter/v8 (and client/v8: CRDs)
CSI_HOSTPATH_VERSION="${CSI_HOSTPATH_VERSION:-1}"
CSI_TEST_VERSION="${CSI_TEST_VERSION:-v5.6.0}"                 # github.com/kubernetes-csi/csi-test/v5 (csi-sanity, hack/k8s/csi-sanity.sh)
CSI_PROVISIONER_IMAGE="felix.local/csi-provisioner:${CSI_PROVISIONER_VERSION}"
CSI_SNAPSHOTTER_IMAGE="felix.local/csi-snapshotter:${CSI_SNAPSHOTTER_VERSION}"
SNAPSHOT_CONTROLLER_IMAGE="felix.local/snapshot-controller:${CSI_SNAPSHOTTER_VERSION}"
CSI_HOSTPATH_IMAGE="felix.local/felix-csi-hostpath:${CSI_HOSTPATH_VERSION}"

# Debian bookworm packages (apt-get install by name; the versions below are
# the ones this was proven with, checked and reported, not forced).
DEB_CONTAINERD_VERSION="1.6.20~ds1-1+deb12u3"
DEB_RUNC_VERSION="1.1.5+ds1-1+deb12u1"
DEB_PACKAGES=(containerd runc iptables openssl curl)

FELIX_TOOL_CACHE="${FELIX_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/felix-tools}"

# Where things live. Binaries go to bin/ (per version) with a copy in the
# per-user cache, so a fresh clone on the same machine reuses the builds.
K8S_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NODE_BIN="${K8S_ROOT}/bin/k8s-node"
NODE_CACHE="${FELIX_TOOL_CACHE}/k8s-node"
KUBE_BIN="${NODE_BIN}/${KUBE_VERSION}"                  # kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl
# SVC_GUARD_PREF is the priority of up.sh's routing rule that makes the
# Service range unreachable from pods (removed by down.sh).
SVC_GUARD_PREF=90
CNI_BIN="${NODE_BIN}/cni-plugins-${CNI_PLUGINS_VERSION}" # bridge, host-local, loopback, portmap, firewall
CRICTL="${NODE_BIN}/crictl-${CRI_TOOLS_VERSION}"
COREDNS="${NODE_BIN}/coredns-${COREDNS_VERSION}"
PAUSE="${NODE_BIN}/pause-${PAUSE_VERSION}"
CSI_BIN="${NODE_BIN}/csi"                               # sidecars (versioned names), the driver, crds-<version>/
IMAGES="${NODE_BIN}/images"                             # docker-save archives imported into containerd

# State of a running cluster: all of it under the work tree (gitignored).
STATE="${FELIX_K8S_STATE:-${K8S_ROOT}/.felix-k8s}"

log() { echo "k8s: $*" >&2; }
die() { echo "k8s: error: $*" >&2; exit 1; }

# have_all DIR FILE...: every FILE is an executable or a file in DIR.
have_all() {
  local dir="$1"; shift
  local f
  for f in "$@"; do [[ -s "${dir}/${f}" ]] || return 1; done
}

# node_builds_cached: every pinned piece `make k8s-up` builds is in the
# per-user cache already (so starting the node takes about a minute, not
# the hour its cold builds take on a shared 2-core machine).
node_builds_cached() {
  have_all "${NODE_CACHE}/${KUBE_VERSION}" kubelet kube-controller-manager kube-scheduler kube-proxy kubectl &&
    have_all "${NODE_CACHE}/cni-plugins-${CNI_PLUGINS_VERSION}" bridge host-local loopback portmap firewall &&
    have_all "${NODE_CACHE}" "crictl-${CRI_TOOLS_VERSION}" "coredns-${COREDNS_VERSION}" "pause-${PAUSE_VERSION}"
}

# csi_builds_cached: the CSI sidecars and snapshot CRDs (hack/k8s/build.sh
# csi) are in the per-user cache, so deploying the CSI driver takes a
# minute (the driver itself is built from the tree each time).
csi_builds_cached() {
  have_all "${NODE_CACHE}/csi" "snapshot-crds-${CSI_SNAPSHOTTER_VERSION}.yaml" \
    "csi-snapshotter-${CSI_SNAPSHOTTER_VERSION}" "snapshot-controller-${CSI_SNAPSHOTTER_VERSION}" \
    "csi-provisioner-${CSI_PROVISIONER_VERSION}"
}
