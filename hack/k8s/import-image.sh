#!/usr/bin/env bash
# import-image.sh IMAGE...: copies Docker images into the real node's
# containerd (hack/k8s/up.sh), where pods with imagePullPolicy Never or
# IfNotPresent find them. The node cannot pull from any registry.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
(( $# )) || die "usage: $0 IMAGE..."
SOCK="${STATE}/run/containerd.sock"
[[ -S "${SOCK}" ]] || die "the real node's containerd is not running (make k8s-up)"
for img in "$@"; do
  log "importing ${img}"
  docker save "${img}" | ctr --address "${SOCK}" -n k8s.io images import - >/dev/null
done
