#!/usr/bin/env bash
# Builds everything the real-node cluster (hack/k8s/up.sh) runs, from pinned
# sources, without pulling any image or prebuilt binary:
#
#   debs       containerd, runc, iptables, openssl, curl from Debian (apt)
#   control    kube-apiserver and etcd (hack/build-envtest.sh, shared cache)
#   node       kubelet, kube-controller-manager, kube-scheduler, kube-proxy,
#              kubectl from k8s.io/kubernetes@KUBE_VERSION
#   cni        bridge, host-local, loopback, portmap plugins
#   crictl     the CRI client (used by down.sh to stop pods cleanly)
#   pause      our pause binary (hack/k8s/pause) and image
#   coredns    the cluster DNS server and its image
#   csi        not in the default list (docs/csi-hostpath.md): our CSI driver
#              (cmd/felix-csi-hostpath), csi-provisioner, csi-snapshotter,
#              snapshot-controller, their images, and the VolumeSnapshot CRDs
#
# Images are FROM scratch, one static binary each (docker build), saved as
# archives in bin/k8s-node/images/ that up.sh imports into containerd.
#
# Usage: hack/k8s/build.sh [STEP...]   (default: all of them, in that order)
# Versions: hack/k8s/lib.sh. Results are cached by version in bin/k8s-node/
# and in ${FELIX_TOOL_CACHE:-~/.cache/felix-tools}/k8s-node/.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "${K8S_ROOT}"

# cached OUT_DIR CACHE_DIR BUILD_FN FILE...: makes sure every FILE is in
# OUT_DIR; copies it from CACHE_DIR, or runs BUILD_FN TMPDIR (which must
# leave every FILE in TMPDIR) and fills CACHE_DIR first.
cached() {
  local out="$1" cache="$2" fn="$3"; shift 3
  if have_all "${out}" "$@"; then return 0; fi
  if ! have_all "${cache}" "$@"; then
    local tmp start f
    tmp="$(mktemp -d)"
    start=$(date +%s)
    "${fn}" "${tmp}" || { rm -rf "${tmp}"; die "${fn} failed"; }
    have_all "${tmp}" "$@" || { rm -rf "${tmp}"; die "${fn} did not produce: $*"; }
    mkdir -p "${cache}"
    for f in "$@"; do cp "${tmp}/${f}" "${cache}/.${f}.$$" && mv "${cache}/.${f}.$$" "${cache}/${f}"; done
    rm -rf "${tmp}"
    log "${fn#build_} built in $(( $(date +%s) - start ))s"
  fi
  mkdir -p "${out}"
  for f in "$@"; do cp "${cache}/${f}" "${out}/${f}"; done
}

# go_install DEST LDFLAGS PACKAGE@VERSION...: static, trimmed binaries into DEST.
go_install() {
  local dest="$1" ldflags="$2"; shift 2
  GOBIN="${dest}" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath -ldflags "${ldflags}" "$@"
}

# image_archive NAME BINARY ENTRYPOINT_JSON USER: a FROM-scratch image holding
# one static binary, saved to ${IMAGES}/<name with / and : as _>.tar.
image_archive() {
  local name="$1" binary="$2" entrypoint="$3" user="$4" ctx tar
  tar="${IMAGES}/$(tr '/:' '__' <<<"${name}").tar"
  [[ -s "${tar}" ]] && return 0
  command -v docker >/dev/null || die "docker is needed to build ${name}"
  ctx="$(mktemp -d)"
  cp "${binary}" "${ctx}/bin"
  printf 'FROM scratch\nCOPY bin /%s\nUSER %s\nENTRYPOINT %s\n' "$(basename "${name%%:*}")" "${user}" "${entrypoint}" > "${ctx}/Dockerfile"
  log "building image ${name}"
  local out
  out="$(docker build -q -t "${name}" "${ctx}" 2>&1)" || { echo "${out}" >&2; rm -rf "${ctx}"; die "docker build of ${name} failed"; }
  rm -rf "${ctx}"
  mkdir -p "${IMAGES}"
  docker save -o "${tar}.tmp" "${name}" && mv "${tar}.tmp" "${tar}"
}
step_debs() {
  local missing=() p
  for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed' || missing+=("${p}")
  done
  if (( ${#missing[@]} )); then
    [[ $(id -u) == 0 ]] || die "need root to apt-get install ${missing[*]}"
    log "apt-get install ${missing[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
  local have
  have="$(dpkg-query -W -f='${Version}' containerd)"
  [[ "${have}" == "${DEB_CONTAINERD_VERSION}" ]] || log "note: containerd ${have} installed, proven with ${DEB_CONTAINERD_VERSION}"
  have="$(dpkg-query -W -f='${Version}' runc)"
  [[ "${have}" == "${DEB_RUNC_VERSION}" ]] || log "note: runc ${have} installed, proven with ${DEB_RUNC_VERSION}"
}

step_control() {
  hack/build-envtest.sh >/dev/null
}

build_kube_node() {
  local dest="$1" work modfile
  work="$(mktemp -d)"
  (
    trap 'rm -rf "${work}"' EXIT
    log "resolving k8s.io/kubernetes@${KUBE_VERSION}"
    modfile="$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    [[ -f "${modfile}" ]] || die "cannot find go.mod of k8s.io/kubernetes@${KUBE_VERSION}"
    cd "${work}"
    # Same trick as hack/build-envtest.sh: k8s.io/kubernetes replaces its
    # staging modules with relative paths, so a throwaway module replaces
    # each one with its published v0 twin.
    printf 'module felix.dev/k8s-node-binaries\n\ngo 1.26\n' > go.mod
    grep -E '=> \./staging/src/' "${modfile}" |
      awk -v v="v0.${KUBE_VERSION#v1.}" '{print "replace " $1 " => " $1 " " v}' >> go.mod
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
    go get "k8s.io/kubernetes@${KUBE_VERSION}" >&2
    go mod tidy >&2 2>/dev/null || true
    local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
    local v=k8s.io/component-base/version
    log "building kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl ${KUBE_VERSION} (about 15 minutes cold on 2 cores)"
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X ${v}.gitVersion=${KUBE_VERSION} -X ${v}.gitMajor=1 -X ${v}.gitMinor=${minor} -X ${v}.gitTreeState=clean" \
      -o "${dest}/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
  )
}
step_node() {
  cached "${KUBE_BIN}" "${NODE_CACHE}/${KUBE_VERSION}" build_kube_node \
    kubelet kube-controller-manager kube-scheduler kube-proxy kubectl
}

build_cni_plugins() {
  local m=github.com/containernetworking/plugins
  log "building CNI plugins ${CNI_PLUGINS_VERSION}"
  go_install "$1" "-s -w -X ${m}/pkg/utils/buildversion.BuildVersion=${CNI_PLUGINS_VERSION}" \
    "${m}/plugins/main/bridge@${CNI_PLUGINS_VERSION}" "${m}/plugins/main/loopback@${CNI_PLUGINS_VERSION}" \
    "${m}/plugins/meta/portmap@${CNI_PLUGINS_VERSION}" "${m}/plugins/meta/firewall@${CNI_PLUGINS_VERSION}" \
    "${m}/plugins/ipam/host-local@${CNI_PLUGINS_VERSION}"
}
step_cni() {
  cached "${CNI_BIN}" "${NODE_CACHE}/cni-plugins-${CNI_PLUGINS_VERSION}" build_cni_plugins \
    bridge host-local loopback portmap firewall
}

build_crictl() {
  log "building crictl ${CRI_TOOLS_VERSION}"
  go_install "$1" "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRI_TOOLS_VERSION}" \
    "sigs.k8s.io/cri-tools/cmd/crictl@${CRI_TOOLS_VERSION}"
  mv "$1/crictl" "$1/crictl-${CRI_TOOLS_VERSION}"
}
step_crictl() {
  cached "${NODE_BIN}" "${NODE_CACHE}" build_crictl "crictl-${CRI_TOOLS_VERSION}"
}

build_coredns() {
  log "building CoreDNS ${COREDNS_VERSION}"
  go_install "$1" "-s -w" "github.com/coredns/coredns@${COREDNS_VERSION}"
  mv "$1/coredns" "$1/coredns-${COREDNS_VERSION}"
}
step_coredns() {
  cached "${NODE_BIN}" "${NODE_CACHE}" build_coredns "coredns-${COREDNS_VERSION}"
  # CoreDNS listens on 1053 as a non-root user (hack/k8s/coredns.yaml).
  image_archive "${COREDNS_IMAGE}" "${COREDNS}" '["/coredns"]' 65532:65532
}

build_pause() {
  log "building pause ${PAUSE_VERSION}"
  (cd "${K8S_ROOT}/hack/k8s/pause" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$1/pause-${PAUSE_VERSION}" .)
}

step_pause() {
  cached "${NODE_BIN}" "${NODE_CACHE}" build_pause "pause-${PAUSE_VERSION}"
  image_archive "${PAUSE_IMAGE}" "${PAUSE}" '["/pause"]' 65535:65535
}

# build_module_cmds DEST MODULE VERSION CMD...: builds ./cmd/CMD of
# MODULE@VERSION from a writable copy of its module cache directory, with
# the module's own go.mod and go.sum (the versions upstream tested). The
# kubernetes-csi modules cannot be "go install"ed: their go.mod has replace
# directives. A relative replace (external-snapshotter's ./client, a nested
# module left out of the zip) is pointed at the published module of the
# same version. Upstream's Makefiles stamp main.version; so do we.
build_module_cmds() {
  local dest="$1" module="$2" version="$3"; shift 3
  local src work
  src="$(go mod download -json "${module}@${version}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [[ -d "${src}" ]] || die "cannot download ${module}@${version}"
  work="$(mktemp -d)"
  (
    trap 'chmod -R u+w "${work}"; rm -rf "${work}"' EXIT
    cp -R "${src}/." "${work}/"
    chmod -R u+w "${work}"
    cd "${work}"
    local path c
    for path in $(awk '$1 == "replace" && $4 ~ /^\.\.?\// {print $2}' go.mod); do
      go mod edit -replace "${path}=${path}@${version}"
    done
    local cmds=()
    for c in "$@"; do cmds+=("./cmd/${c}"); done
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X main.version=${version}" -o "${dest}/" "${cmds[@]}"
    for c in "$@"; do mv "${dest}/${c}" "${dest}/${c}-${version}"; done
  )
}
build_csi_provisioner() {
  log "building csi-provisioner ${CSI_PROVISIONER_VERSION}"
  build_module_cmds "$1" github.com/kubernetes-csi/external-provisioner/v6 "${CSI_PROVISIONER_VERSION}" csi-provisioner
}
build_csi_snapshotter() {
  log "building csi-snapshotter and snapshot-controller ${CSI_SNAPSHOTTER_VERSION}"
  build_module_cmds "$1" github.com/kubernetes-csi/external-snapshotter/v8 "${CSI_SNAPSHOTTER_VERSION}" csi-snapshotter snapshot-controller
}
# build_snapshot_crds DEST: the CRDs of client/v8 at the snapshotter's
# version, from the module cache (go mod download), as one multi-document
# YAML file: VolumeSnapshot, VolumeSnapshotContent, VolumeSnapshotClass and
# their group twins (the snapshot-controller watches those too: the group
# snapshot feature is GA and cannot be turned off).
build_snapshot_crds() {
  local dir f
  dir="$(go mod download -json "github.com/kubernetes-csi/external-snapshotter/client/v8@${CSI_SNAPSHOTTER_VERSION}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [[ -d "${dir}/config/crd" ]] || die "no config/crd in external-snapshotter/client/v8@${CSI_SNAPSHOTTER_VERSION}"
  for f in "${dir}"/config/crd/*snapshot.storage.k8s.io_*.yaml; do
    echo "---"
    cat "${f}"
  done > "$1/snapshot-crds-${CSI_SNAPSHOTTER_VERSION}.yaml"
}
step_csi() {
  local p="csi-provisioner-${CSI_PROVISIONER_VERSION}" s="csi-snapshotter-${CSI_SNAPSHOTTER_VERSION}" c="snapshot-controller-${CSI_SNAPSHOTTER_VERSION}"
  cached "${CSI_BIN}" "${NODE_CACHE}/csi" build_snapshot_crds "snapshot-crds-${CSI_SNAPSHOTTER_VERSION}.yaml"
  cached "${CSI_BIN}" "${NODE_CACHE}/csi" build_csi_snapshotter "${s}" "${c}"
  cached "${CSI_BIN}" "${NODE_CACHE}/csi" build_csi_provisioner "${p}"
  # The sidecars only talk to the API server and to the driver's socket.
  image_archive "${CSI_PROVISIONER_IMAGE}" "${CSI_BIN}/${p}" '["/csi-provisioner"]' 65532:65532
  image_archive "${CSI_SNAPSHOTTER_IMAGE}" "${CSI_BIN}/${s}" '["/csi-snapshotter"]' 65532:65532
  image_archive "${SNAPSHOT_CONTROLLER_IMAGE}" "${CSI_BIN}/${c}" '["/snapshot-controller"]' 65532:65532
  # The driver is built from this tree every time (the Go build cache makes
  # that quick) and so is its image: it mounts, so it runs as root.
  log "building felix-csi-hostpath (image tag ${CSI_HOSTPATH_VERSION})"
  mkdir -p "${CSI_BIN}"
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "${CSI_BIN}/felix-csi-hostpath" ./cmd/felix-csi-hostpath
  rm -f "${IMAGES}/$(tr '/:' '__' <<<"${CSI_HOSTPATH_IMAGE}").tar"
  image_archive "${CSI_HOSTPATH_IMAGE}" "${CSI_BIN}/felix-csi-hostpath" '["/felix-csi-hostpath"]' 0:0
}

steps=("$@")
(( ${#steps[@]} )) || steps=(debs control node cni crictl pause coredns)
for s in "${steps[@]}"; do
  declare -F "step_${s}" >/dev/null || die "unknown step ${s} (debs control node cni crictl pause coredns csi)"
  "step_${s}"
done
