#!/usr/bin/env bash
# Measures the peer Felix is compared with (NATS JetStream, three replicas on
# loopback, 1 KiB messages) in the harness shapes of Felix's own R=3
# benchmark, then runs that benchmark, so both land in one window of the
# same machine. Versions are pinned in hack/natsbench/go.mod.
#
#   hack/bench-peer.sh            # all four NATS shapes, then Felix
#   DURATION=20s hack/bench-peer.sh
#   SKIP_FELIX=1 hack/bench-peer.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-10s}"
mkdir -p bin
(cd hack/natsbench && go build -o ../../bin/natsbench . && go build -o ../../bin/nats-server github.com/nats-io/nats-server/v2)

run() { echo "# natsbench $*" >&2; bin/natsbench --server bin/nats-server --duration "$DURATION" "$@"; }
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
run --publishers 16 --pending 1                 # sync16, default durability
run --publishers 16 --pending 8                 # pipelined, default durability
run --publishers 16 --pending 1 --sync-always   # sync16, fsync before every ack
run --publishers 16 --pending 8 --sync-always   # pipelined, fsync before every ack
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [[ -z "${SKIP_FELIX:-}" ]]; then
	go test -run XXX -bench 'QuorumAppend/(periodic|on-commit)/(pipelined|sync16)$' -benchtime "${FELIX_BENCHTIME:-100000x}" ./broker/replica
	echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
fi
