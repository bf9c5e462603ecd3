#!/usr/bin/env bash
# Starts a real single-node Kubernetes cluster on this machine (see
# docs/real-node.md): etcd, kube-apiserver, containerd + runc, the CNI bridge,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy and CoreDNS, all
# as processes of this script, built from pinned sources (hack/k8s/build.sh),
# with every byte of state under .felix-k8s/ (logs in .felix-k8s/logs/).
# Nothing is pulled: the images the node runs are built locally and imported.
#
# Idempotent: components that already run are left alone. Stop with
# hack/k8s/down.sh (make k8s-down). Needs root.
#
#   KUBECONFIG=.felix-k8s/kubeconfig bin/k8s-node/v1.37.2/kubectl get nodes
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "${K8S_ROOT}"

[[ $(id -u) == 0 ]] || die "the kubelet and containerd need root; run as root"

# Ports (none of them a Kubernetes default, so tests that start their own
# API server or etcd do not collide).
APISERVER_PORT="${APISERVER_PORT:-16443}"
ETCD_CLIENT_PORT="${ETCD_CLIENT_PORT:-12379}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-12380}"
KUBELET_PORT="${KUBELET_PORT:-20250}"
KUBELET_HEALTHZ_PORT="${KUBELET_HEALTHZ_PORT:-20248}"
KCM_PORT="${KCM_PORT:-20257}"
SCHEDULER_PORT="${SCHEDULER_PORT:-20259}"
PROXY_METRICS_PORT="${PROXY_METRICS_PORT:-20249}"
PROXY_HEALTHZ_PORT="${PROXY_HEALTHZ_PORT:-20256}"
NODE_NAME="${NODE_NAME:-felix-node}"
CLUSTER_CIDR="${CLUSTER_CIDR:-10.244.0.0/16}"
SERVICE_CIDR="${SERVICE_CIDR:-10.96.0.0/16}"
KUBERNETES_SVC_IP="${KUBERNETES_SVC_IP:-10.96.0.1}"
DNS_SVC_IP="${DNS_SVC_IP:-10.96.0.10}"
CLUSTER_DOMAIN="${CLUSTER_DOMAIN:-cluster.local}"
BRIDGE="${BRIDGE:-felixbr0}"
DEADLINE="${DEADLINE:-120}" # seconds each component gets to become ready

if [[ -z "${FELIX_K8S_NO_BUILD:-}" ]]; then
  log "building or reusing the pinned binaries (hack/k8s/build.sh)"
  hack/k8s/build.sh
fi
CONTROL_BIN="$(hack/build-envtest.sh)"

RUN="${STATE}/run" LOGS="${STATE}/logs" PKI="${STATE}/pki" KC="${STATE}/kubeconfig.d"
SOCK="${RUN}/containerd.sock"
mkdir -p "${RUN}" "${LOGS}" "${PKI}" "${KC}" "${STATE}/etcd" "${STATE}/containerd" \
  "${STATE}/cni/net.d" "${STATE}/cni/ipam" "${STATE}/kubelet" "${STATE}/config"
chmod 700 "${PKI}" "${STATE}/etcd"
export KUBECONFIG="${STATE}/kubeconfig"
KUBECTL="${KUBE_BIN}/kubectl"

# ---- preflight --------------------------------------------------------------

NODE_IP="${NODE_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')}"
[[ -n "${NODE_IP}" ]] || die "cannot find this machine's IPv4 address (no default route?); set NODE_IP"
if [[ "$(stat -fc %T /sys/fs/cgroup)" == cgroup2fs ]]; then CGROUPS=v2; else CGROUPS=v1; fi
log "node ${NODE_NAME} at ${NODE_IP}, cgroup ${CGROUPS}, state in ${STATE}"
[[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] || modprobe br_netfilter 2>/dev/null ||
  die "bridge netfilter is missing (modprobe br_netfilter failed): Services cannot reach pods on the bridge"
# The kubelet sets a few kernel sysctls (vm.overcommit_memory, kernel.panic...)
# as on any node, and this script two more; remember the machine's values
# once, so down.sh puts them back.
SYSCTLS=(net.bridge.bridge-nf-call-iptables net.ipv4.ip_forward net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom
  kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
if [[ ! -s "${STATE}/sysctl.orig" ]]; then
  mkdir -p "${STATE}"
  for k in "${SYSCTLS[@]}"; do echo "${k}=$(sysctl -n "${k}")"; done > "${STATE}/sysctl.orig.tmp"
  mv "${STATE}/sysctl.orig.tmp" "${STATE}/sysctl.orig"
fi
sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1

# ---- processes ----------------------------------------------------------------

# running NAME: the process recorded in run/NAME.pid is alive and is still
# the binary we started (a stale pid file after a reboot is not).
running() {
  local pidf="${RUN}/$1.pid" pid exe
  [[ -s "${pidf}" ]] || return 1
  read -r pid exe < "${pidf}"
  [[ -d "/proc/${pid}" && "$(readlink "/proc/${pid}/exe" 2>/dev/null)" == "${exe}" ]]
}

# start NAME BINARY ARGS...: runs BINARY in its own session, output to
# logs/NAME.log, pid and binary recorded in run/NAME.pid.
start() {
  local name="$1" bin="$2"; shift 2
  if running "${name}"; then log "${name} already running (pid $(cut -d' ' -f1 "${RUN}/${name}.pid"))"; return 0; fi
  [[ -x "${bin}" ]] || die "${bin} is missing (hack/k8s/build.sh builds it)"
  log "starting ${name}"
  echo "==== $(date -u +%FT%TZ) ${bin} $*" >> "${LOGS}/${name}.log"
  setsid "${bin}" "$@" >> "${LOGS}/${name}.log" 2>&1 < /dev/null &
  echo "$! $(readlink -f "${bin}")" > "${RUN}/${name}.pid"
}

# wait_for NAME WHAT CMD...: polls CMD until it succeeds, failing early if
# process NAME died and after DEADLINE seconds, with the end of its log.
wait_for() {
  local name="$1" what="$2"; shift 2
  local deadline=$(( $(date +%s) + DEADLINE ))
  until "$@" >/dev/null 2>&1; do
    if [[ "${name}" != - ]] && ! running "${name}"; then
      tail -n 30 "${LOGS}/${name}.log" >&2 || true
      die "${name} exited before ${what} (log: ${LOGS}/${name}.log)"
    fi
    if (( $(date +%s) >= deadline )); then
      [[ "${name}" != - ]] && { tail -n 30 "${LOGS}/${name}.log" >&2 || true; }
      die "timed out after ${DEADLINE}s waiting for ${what}${name:+ (log: ${LOGS}/${name}.log)}"
    fi
    sleep 0.5
  done
}

# port_free NAME PORT: dies if PORT is bound by anything but our NAME.
port_free() {
  running "$1" && return 0
  if ss -Htln "sport = :$2" | grep -q .; then
    die "port $2 (for $1) is already in use: $(ss -Htlnp "sport = :$2" | head -1)"
  fi
}

# ---- PKI ------------------------------------------------------------------------

# cert NAME CN [O] [SAN]: an ECDSA key and a certificate signed by our CA.
cert() {
  local name="$1" cn="$2" o="${3:-}" san="${4:-}" subj ext
  [[ -s "${PKI}/${name}.crt" ]] && return 0
  subj="/CN=${cn}"; [[ -n "${o}" ]] && subj="/O=${o}${subj}"
  ext="${PKI}/${name}.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n "${san}" ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=${san}"
    else echo "extendedKeyUsage=clientAuth"; fi
  } > "${ext}"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "${subj}" \
    -keyout "${PKI}/${name}.key" -out "${PKI}/${name}.csr" 2>/dev/null
  openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" -CAcreateserial \
    -days 365 -extfile "${ext}" -out "${PKI}/${name}.crt" 2>/dev/null
  rm -f "${PKI}/${name}.csr" "${ext}"
}

pki() {
  if [[ ! -s "${PKI}/ca.crt" ]]; then
    log "creating the cluster CA and certificates in ${PKI}"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=felix-k8s-ca" -keyout "${PKI}/ca.key" -out "${PKI}/ca.crt" 2>/dev/null
  fi
  if [[ ! -s "${PKI}/sa.key" ]]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "${PKI}/sa.key"
    openssl ec -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
  fi
  # The API server's certificate names the node IP: a new IP, a new certificate.
  if [[ "$(cat "${PKI}/apiserver.node-ip" 2>/dev/null)" != "${NODE_IP}" ]]; then
    rm -f "${PKI}/apiserver.crt"
    echo "${NODE_IP}" > "${PKI}/apiserver.node-ip"
  fi
  cert apiserver kube-apiserver "" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.${CLUSTER_DOMAIN},DNS:localhost,IP:127.0.0.1,IP:${NODE_IP},IP:${KUBERNETES_SVC_IP}"
  cert admin felix-k8s-admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  cert kubelet "system:node:${NODE_NAME}" system:nodes
  cert kube-proxy system:kube-proxy
}

# kubeconfig NAME CERT: a kubeconfig for client certificate CERT.
kubeconfig() {
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: felix-k8s
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority: ${PKI}/ca.crt
users:
- name: $2
  user:
    client-certificate: ${PKI}/$2.crt
    client-key: ${PKI}/$2.key
contexts:
- name: felix-k8s
  context: {cluster: felix-k8s, user: $2}
current-context: felix-k8s
EOF
}

pki
kubeconfig "${STATE}/kubeconfig" admin
for c in controller-manager scheduler kubelet kube-proxy; do kubeconfig "${KC}/${c}" "${c}"; done

# ---- etcd and the API server ----------------------------------------------------

port_free etcd "${ETCD_CLIENT_PORT}"; port_free etcd "${ETCD_PEER_PORT}"
start etcd "${CONTROL_BIN}/etcd" --name felix-k8s --data-dir "${STATE}/etcd" \
  --listen-client-urls "http://127.0.0.1:${ETCD_CLIENT_PORT}" --advertise-client-urls "http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-cluster "felix-k8s=http://127.0.0.1:${ETCD_PEER_PORT}"
wait_for etcd "etcd health" curl -sf "http://127.0.0.1:${ETCD_CLIENT_PORT}/health"

port_free kube-apiserver "${APISERVER_PORT}"
start kube-apiserver "${CONTROL_BIN}/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --bind-address 0.0.0.0 --secure-port "${APISERVER_PORT}" --advertise-address "${NODE_IP}" \
  --tls-cert-file "${PKI}/apiserver.crt" --tls-private-key-file "${PKI}/apiserver.key" \
  --client-ca-file "${PKI}/ca.crt" \
  --kubelet-client-certificate "${PKI}/apiserver-kubelet-client.crt" --kubelet-client-key "${PKI}/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --service-cluster-ip-range "${SERVICE_CIDR}" \
  --service-account-issuer "https://kubernetes.default.svc.${CLUSTER_DOMAIN}" \
  --service-account-key-file "${PKI}/sa.pub" --service-account-signing-key-file "${PKI}/sa.key" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --allow-privileged=true --profiling=false
wait_for kube-apiserver "the API server to be ready" \
  curl -sf --cacert "${PKI}/ca.crt" --cert "${PKI}/admin.crt" --key "${PKI}/admin.key" "https://127.0.0.1:${APISERVER_PORT}/readyz"

# ---- containerd, the CNI bridge, the images ---------------------------------------

cat > "${STATE}/config/containerd.toml" <<EOF
# Written by hack/k8s/up.sh; containerd ${DEB_CONTAINERD_VERSION%%~*} (config version 2).
version = 2
root = "${STATE}/containerd/root"
state = "${STATE}/containerd/state"
[grpc]
  address = "${SOCK}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "${STATE}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  # Lowering an oom_score_adj needs CAP_SYS_RESOURCE, which some sandboxes
  # (this project's VMs) do not grant even to root: never go below ours.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "${CNI_BIN}"
    conf_dir = "${STATE}/cni/net.d"
    max_conf_num = 1
EOF
start containerd "$(command -v containerd)" --config "${STATE}/config/containerd.toml"
wait_for containerd "containerd's socket" ctr --address "${SOCK}" version

# import_image ARCHIVE NAME: imports a docker-save archive unless containerd has NAME.
import_image() {
  local ref="$2"
  [[ "${ref}" == */* ]] || ref="docker.io/library/${ref}"
  [[ "${ref}" == *.*/* || "${ref}" == docker.io/* ]] || ref="docker.io/${ref}"
  ctr --address "${SOCK}" -n k8s.io images ls -q | grep -qxF "${ref}" && return 0
  log "importing ${2} into containerd"
  ctr --address "${SOCK}" -n k8s.io images import "$1" >/dev/null
}
import_image "${IMAGES}/$(tr '/:' '__' <<<"${PAUSE_IMAGE}").tar" "${PAUSE_IMAGE}"
import_image "${IMAGES}/$(tr '/:' '__' <<<"${COREDNS_IMAGE}").tar" "${COREDNS_IMAGE}"

# ---- controllers --------------------------------------------------------------------

port_free kube-controller-manager "${KCM_PORT}"
start kube-controller-manager "${KUBE_BIN}/kube-controller-manager" \
  --kubeconfig "${KC}/controller-manager" \
  --authentication-kubeconfig "${KC}/controller-manager" --authorization-kubeconfig "${KC}/controller-manager" \
  --bind-address 127.0.0.1 --secure-port "${KCM_PORT}" --leader-elect=false \
  --use-service-account-credentials --service-account-private-key-file "${PKI}/sa.key" \
  --root-ca-file "${PKI}/ca.crt" \
  --cluster-signing-cert-file "${PKI}/ca.crt" --cluster-signing-key-file "${PKI}/ca.key" \
  --allocate-node-cidrs --cluster-cidr "${CLUSTER_CIDR}" --node-cidr-mask-size 24 \
  --service-cluster-ip-range "${SERVICE_CIDR}"
port_free kube-scheduler "${SCHEDULER_PORT}"
start kube-scheduler "${KUBE_BIN}/kube-scheduler" \
  --kubeconfig "${KC}/scheduler" \
  --authentication-kubeconfig "${KC}/scheduler" --authorization-kubeconfig "${KC}/scheduler" \
  --bind-address 127.0.0.1 --secure-port "${SCHEDULER_PORT}" --leader-elect=false
wait_for kube-controller-manager "kube-controller-manager to be healthy" curl -sfk "https://127.0.0.1:${KCM_PORT}/healthz"
wait_for kube-scheduler "kube-scheduler to be healthy" curl -sfk "https://127.0.0.1:${SCHEDULER_PORT}/healthz"

# ---- kubelet ----------------------------------------------------------------------------

cat > "${STATE}/config/kubelet.yaml" <<EOF
# Written by hack/k8s/up.sh.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups may be v1; the kubelet refuses v1 unless told not to.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
# 0, not -999: without CAP_SYS_RESOURCE a process cannot lower its own score.
oomScoreAdj: 0
containerRuntimeEndpoint: unix://${SOCK}
address: 0.0.0.0
port: ${KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${KUBELET_HEALTHZ_PORT}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${PKI}/ca.crt}
authorization:
  mode: Webhook
clusterDomain: ${CLUSTER_DOMAIN}
clusterDNS: [${DNS_SVC_IP}]
resolvConf: /etc/resolv.conf
# No registry is reachable: an image the GC deletes cannot come back.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A shared development machine: evict only when really short.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: 1%
EOF
# The kubelet's directory is a shared mount point, so that the mounts a CSI
# node plugin makes under it through a Bidirectional volume mount
# (hack/k8s/csi/node.yaml) reach the host and the pods: / is a private
# mount on this machine and containerd refuses Bidirectional below a private
# mount. Done before the kubelet starts (a running kubelet's mounts would be
# shadowed); k8s-down unmounts it with every other mount under .felix-k8s/.
mkdir -p "${STATE}/kubelet"
if ! running kubelet && [[ "$(findmnt -rn -M "${STATE}/kubelet" -o PROPAGATION 2>/dev/null)" != shared ]]; then
  mount --rbind "${STATE}/kubelet" "${STATE}/kubelet"
  mount --make-rshared "${STATE}/kubelet"
fi
port_free kubelet "${KUBELET_PORT}"
start kubelet "${KUBE_BIN}/kubelet" --config "${STATE}/config/kubelet.yaml" \
  --kubeconfig "${KC}/kubelet" --root-dir "${STATE}/kubelet" \
  --hostname-override "${NODE_NAME}" --node-ip "${NODE_IP}"
wait_for kubelet "the kubelet to be healthy" curl -sf "http://127.0.0.1:${KUBELET_HEALTHZ_PORT}/healthz"
wait_for kubelet "node ${NODE_NAME} to register" "${KUBECTL}" get node "${NODE_NAME}"
pod_cidr() { "${KUBECTL}" get node "${NODE_NAME}" -o 'jsonpath={.spec.podCIDR}'; }
has_pod_cidr() { [[ -n "$(pod_cidr)" ]]; }
wait_for kube-controller-manager "a pod CIDR for ${NODE_NAME}" has_pod_cidr
POD_CIDR="$(pod_cidr)"

# One bridge for the node's pods; host-local hands out the node's pod CIDR.
# firewall accepts each pod's traffic in FORWARD: with bridge netfilter on,
# even pod-to-pod packets on the bridge cross FORWARD, whose policy Docker
# sets to DROP.
cat > "${STATE}/cni/net.d/10-felix-k8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "felix-k8s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${BRIDGE}",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${STATE}/cni/ipam",
        "ranges": [[{"subnet": "${POD_CIDR}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"}
  ]
}
EOF
log "pod network ${POD_CIDR} on bridge ${BRIDGE}"

# A pod's packet to a Service address that kube-proxy has not programmed
# yet (a Service seconds old, or none of its endpoints ready before the
# REJECT rule lands) is not rewritten, so the node would route it out of
# its default interface as to any other address. Behind an egress proxy
# that intercepts every connection (these CI machines have one, answering
# TLS with a certificate of its own) the client would then meet a stranger
# instead of a refused connection. A real cluster's Service range leads
# nowhere: a routing rule makes it unreachable from pods. It is a rule,
# not a FORWARD filter, because the CNI firewall plugin and kube-proxy
# put their accepting chains ahead of anything in FORWARD; routing sees
# the address after kube-proxy's rewrite, so programmed Services and
# every reply pass.
SVC_GUARD=(from "${CLUSTER_CIDR}" to "${SERVICE_CIDR}" unreachable pref "${SVC_GUARD_PREF}")
ip rule show pref "${SVC_GUARD_PREF}" | grep -q unreachable || ip rule add "${SVC_GUARD[@]}"
wait_for kubelet "node ${NODE_NAME} to be Ready" "${KUBECTL}" wait --for=condition=Ready "node/${NODE_NAME}" --timeout=5s

# ---- kube-proxy -------------------------------------------------------------------------

# kube-proxy exits when its configuration file changes: write only a change.
put() { cat > "$1.new"; if cmp -s "$1.new" "$1"; then rm -f "$1.new"; else mv "$1.new" "$1"; fi; }
put "${STATE}/config/kube-proxy.yaml" <<EOF
# Written by hack/k8s/up.sh.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: ${KC}/kube-proxy
hostnameOverride: ${NODE_NAME}
clusterCIDR: ${CLUSTER_CIDR}
detectLocalMode: ClusterCIDR
# NodePorts on the node's address only, not on every local address.
nodePortAddresses: [primary]
metricsBindAddress: 127.0.0.1:${PROXY_METRICS_PORT}
healthzBindAddress: 127.0.0.1:${PROXY_HEALTHZ_PORT}
oomScoreAdj: 0
# Leave the host's conntrack sysctls as they are (0: do not set).
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
port_free kube-proxy "${PROXY_HEALTHZ_PORT}"
start kube-proxy "${KUBE_BIN}/kube-proxy" --config "${STATE}/config/kube-proxy.yaml"
wait_for kube-proxy "kube-proxy to be healthy" curl -sf "http://127.0.0.1:${PROXY_HEALTHZ_PORT}/healthz"

# ---- CoreDNS --------------------------------------------------------------------------------

sed -e "s|@COREDNS_IMAGE@|${COREDNS_IMAGE}|g" -e "s|@DNS_SVC_IP@|${DNS_SVC_IP}|g" \
  -e "s|@CLUSTER_DOMAIN@|${CLUSTER_DOMAIN}|g" hack/k8s/coredns.yaml | "${KUBECTL}" apply -f - >/dev/null
wait_for - "CoreDNS to be available" "${KUBECTL}" -n kube-system wait --for=condition=Available deployment/coredns --timeout=5s

log "up: node ${NODE_NAME} Ready; kubectl: KUBECONFIG=${KUBECONFIG} ${KUBECTL}"
