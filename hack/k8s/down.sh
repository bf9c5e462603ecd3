#!/usr/bin/env bash
# Stops the real-node cluster that hack/k8s/up.sh started: every pod (through
# the CRI, so the CNI plugins release their addresses and rules), then each
# component in reverse order, kube-proxy's iptables rules, the pod bridge and
# every mount under the state directory. Idempotent.
#
#   hack/k8s/down.sh           keep .felix-k8s/ (certificates, etcd data, logs)
#   hack/k8s/down.sh --purge   and delete it
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "${K8S_ROOT}"

purge=false
case "${1:-}" in
  --purge) purge=true ;;
  "") ;;
  *) die "usage: $0 [--purge]" ;;
esac
RUN="${STATE}/run"
SOCK="${RUN}/containerd.sock"
BRIDGE="${BRIDGE:-felixbr0}"
STOP_DEADLINE="${STOP_DEADLINE:-30}"
if [[ ! -d "${STATE}" ]]; then log "nothing to stop (no ${STATE})"; exit 0; fi
[[ $(id -u) == 0 ]] || die "run as root (the cluster's processes and mounts are root's)"

# pid_of NAME: the pid recorded for NAME if that process still runs the
# binary we started (or a binary of that path since replaced by a rebuild,
# which the kernel shows with a " (deleted)" suffix).
pid_of() {
  local pidf="${RUN}/$1.pid" pid exe running
  [[ -s "${pidf}" ]] || return 1
  read -r pid exe < "${pidf}"
  [[ -d "/proc/${pid}" ]] || return 1
  running="$(readlink "/proc/${pid}/exe" 2>/dev/null)"
  [[ "${running}" == "${exe}" || "${running}" == "${exe} (deleted)" ]] || return 1
  echo "${pid}"
}

# stop NAME: SIGTERM, wait up to STOP_DEADLINE seconds, then SIGKILL.
stop() {
  local name="$1" pid deadline
  if ! pid="$(pid_of "${name}")"; then rm -f "${RUN}/${name}.pid"; return 0; fi
  log "stopping ${name} (pid ${pid})"
  kill -TERM "${pid}" 2>/dev/null || true
  deadline=$(( $(date +%s) + STOP_DEADLINE ))
  while [[ -d "/proc/${pid}" ]]; do
    if (( $(date +%s) >= deadline )); then
      log "${name} did not stop in ${STOP_DEADLINE}s: SIGKILL"
      kill -KILL "${pid}" 2>/dev/null || true
    fi
    sleep 0.2
  done
  rm -f "${RUN}/${name}.pid"
}

# Controllers first, so nothing recreates what is being removed; then the
# kubelet, so it does not restart the pods the CRI removes.
stop kube-proxy
stop kube-scheduler
stop kube-controller-manager
stop kubelet

if pid_of containerd >/dev/null; then
  crictl=(env CONTAINER_RUNTIME_ENDPOINT="unix://${SOCK}" IMAGE_SERVICE_ENDPOINT="unix://${SOCK}" "${CRICTL}" --timeout 30s)
  if [[ -x "${CRICTL}" ]] && [[ -n "$("${crictl[@]}" pods -q 2>/dev/null)" ]]; then
    log "removing every pod sandbox"
    "${crictl[@]}" stopp $("${crictl[@]}" pods -q 2>/dev/null) >/dev/null 2>&1 || true
    "${crictl[@]}" rmp -f $("${crictl[@]}" pods -q 2>/dev/null) >/dev/null 2>&1 || true
  fi
  # Whatever the CRI could not remove: kill and delete by hand.
  for id in $(ctr --address "${SOCK}" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "${SOCK}" -n k8s.io tasks kill -s SIGKILL "${id}" >/dev/null 2>&1 || true
    ctr --address "${SOCK}" -n k8s.io tasks delete -f "${id}" >/dev/null 2>&1 || true
  done
fi
stop containerd
# A shim serves one of our sandboxes and names our socket: ours, by pid.
for d in /proc/[0-9]*; do
  if [[ "$(readlink "${d}/exe" 2>/dev/null)" == */containerd-shim-runc-v2 ]] &&
     tr '\0' ' ' < "${d}/cmdline" 2>/dev/null | grep -qF -- "-address ${SOCK} "; then
    log "killing leftover shim ${d#/proc/}"
    kill -KILL "${d#/proc/}" 2>/dev/null || true
  fi
done
stop kube-apiserver
stop etcd

# kube-proxy's chains, the pod bridge, the kubelet's pod cgroups.
if [[ -x "${KUBE_BIN}/kube-proxy" ]] && iptables -t nat -S KUBE-SERVICES >/dev/null 2>&1; then
  log "removing kube-proxy's iptables rules"
  "${KUBE_BIN}/kube-proxy" --cleanup >/dev/null 2>&1 || true
fi
# up.sh's routing rule for unprogrammed Service addresses.
while ip rule show pref "${SVC_GUARD_PREF}" | grep -q unreachable; do
  ip rule del pref "${SVC_GUARD_PREF}" || break
done
# The CNI firewall plugin's chains, once no pod uses them; the kubelet's canary.
if iptables -S CNI-FORWARD >/dev/null 2>&1 && [[ $(iptables -S CNI-FORWARD | wc -l) -le 2 ]]; then
  log "removing the CNI firewall chains"
  iptables -D FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD 2>/dev/null || true
  iptables -F CNI-FORWARD && iptables -X CNI-FORWARD && iptables -F CNI-ADMIN && iptables -X CNI-ADMIN || true
fi
for t in nat mangle filter; do
  iptables -t "${t}" -S KUBE-KUBELET-CANARY >/dev/null 2>&1 && iptables -t "${t}" -X KUBE-KUBELET-CANARY 2>/dev/null || true
done
if ip link show "${BRIDGE}" >/dev/null 2>&1; then
  log "removing bridge ${BRIDGE}"
  ip link delete "${BRIDGE}"
fi
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [[ -d "${d}" ]] && find "${d}" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

# Mounts under the state directory (projected volumes, rootfs, shm), deepest first.
mounts() { findmnt -rn -o TARGET | grep -F "${STATE}/" | sort -r || true; }
for m in $(mounts); do umount "${m}" 2>/dev/null || umount -l "${m}" || true; done
if [[ -n "$(mounts)" ]]; then
  mounts >&2
  die "these mounts under ${STATE} are still there"
fi

# The kernel settings the kubelet and up.sh changed, as they were before.
if [[ -s "${STATE}/sysctl.orig" ]]; then
  log "restoring kernel settings ($(paste -sd' ' "${STATE}/sysctl.orig"))"
  sysctl -qw $(cat "${STATE}/sysctl.orig") || true
  rm -f "${STATE}/sysctl.orig"
fi

if ${purge}; then
  log "deleting ${STATE}"
  rm -rf --one-file-system "${STATE}"
fi
log "down"
