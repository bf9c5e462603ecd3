#!/usr/bin/env bash
# Proves the real node (hack/k8s/up.sh) runs what Felix needs: the Felix image,
# built here FROM scratch and imported into the node's containerd, runs as a
# standalone broker pod behind a ClusterIP Service; the host reaches it
# through kube-proxy's rules, and a second pod appends to it and reads back
# through the Service's DNS names (CoreDNS). Leaves namespace felix-k8s-check
# in place for inspection; it is deleted at the start of the next run.
#
#   IMG=felix:dev hack/k8s/check.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "${K8S_ROOT}"

IMG="${IMG:-felix:dev}"
NS=felix-k8s-check
export KUBECONFIG="${STATE}/kubeconfig"
kubectl() { "${KUBE_BIN}/kubectl" "$@"; }

kubectl get --raw /readyz >/dev/null 2>&1 || die "the real node is not up (make k8s-up)"

log "building ${IMG} (BASE=scratch) and importing it into the node's containerd"
BASE=scratch hack/docker-build.sh "${IMG}" >/dev/null
hack/k8s/import-image.sh "${IMG}"

kubectl delete namespace "${NS}" --ignore-not-found --wait=true --timeout=120s >/dev/null
kubectl create namespace "${NS}" >/dev/null
kubectl -n "${NS}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: broker
  labels: {app: broker}
spec:
  containers:
  - name: broker
    image: ${IMG}
    imagePullPolicy: Never
    args: [broker, --standalone, --data-dir, /data, --listen, ":7070", --http, ":7071", --fsync, none]
    ports:
    - {name: felix, containerPort: 7070}
    - {name: http, containerPort: 7071}
    readinessProbe:
      httpGet: {path: /ready, port: 7071}
      periodSeconds: 1
    volumeMounts:
    - {name: data, mountPath: /data}
    securityContext: {runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
  volumes:
  - name: data
    emptyDir: {}
---
apiVersion: v1
kind: Service
metadata:
  name: broker
spec:
  selector: {app: broker}
  ports:
  - {name: felix, port: 7070, targetPort: 7070}
  - {name: http, port: 7071, targetPort: 7071}
EOF
log "waiting for the broker pod to be Ready"
kubectl -n "${NS}" wait --for=condition=Ready pod/broker --timeout=120s >/dev/null ||
  { kubectl -n "${NS}" describe pod broker >&2; die "the broker pod did not become Ready"; }
kubectl -n "${NS}" get pod broker -o wide

ip="$(kubectl -n "${NS}" get service broker -o 'jsonpath={.spec.clusterIP}')"
log "host -> ClusterIP ${ip}:7071/ready (kube-proxy)"
deadline=$(( $(date +%s) + 60 ))
until curl -sf "http://${ip}:7071/ready"; do
  (( $(date +%s) < deadline )) || die "the Service's ClusterIP ${ip} did not answer within 60s"
  sleep 0.5
done
echo

log "pod -> broker.${NS}.svc.cluster.local:7070 (CoreDNS + kube-proxy): append, then read back by short name"
kubectl -n "${NS}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  restartPolicy: Never
  initContainers:
  - name: append
    image: ${IMG}
    imagePullPolicy: Never
    args: [append, --broker, "broker.${NS}.svc.cluster.local:7070", --stream, check, --shard, "0", --payload, hello-from-a-pod]
  containers:
  - name: read
    image: ${IMG}
    imagePullPolicy: Never
    args: [read, --broker, "broker:7070", --stream, check, --shard, "0", --from, earliest, --limit, "1"]
EOF
kubectl -n "${NS}" wait --for=jsonpath='{.status.phase}'=Succeeded pod/client --timeout=120s >/dev/null ||
  { kubectl -n "${NS}" describe pod client >&2; kubectl -n "${NS}" logs client --all-containers >&2 || true; die "the client pod did not succeed"; }
echo "append: $(kubectl -n "${NS}" logs client -c append)"
echo "read:   $(kubectl -n "${NS}" logs client -c read)"
kubectl -n "${NS}" logs client -c read | grep -q hello-from-a-pod || die "the record read back is not the one appended"
log "check passed"
