#!/usr/bin/env bash
# Compares Felix's counter adds with the peer's counters (NATS JetStream
# distributed counters: a stream with AllowMsgCounter, publishes with the
# header Nats-Incr) under fsync-per-write durability, in rounds that
# alternate them: per round, the peer (hack/natsbench --counter-keys, R=3,
# --sync-always) with 8 and 16 synchronous clients on one counter and on
# four, then Felix's BenchmarkClusterCounterAdd (three `felix broker`
# processes, fsync on commit, a 3-replica Quorum stream of four shards,
# `felix bench --counter-key` with as many routing clients, one add at a
# time each) on one shard and on four. Both check that the counters end
# at the adds acknowledged. Prints one line per round and shape with adds/s
# and p99 of both and the ratio.
#
#   hack/bench-counters.sh                  # 2 rounds of 8 s runs
#   ROUNDS=3 DURATION=10s hack/bench-counters.sh
#
# Both run in plaintext (the peer's client connections and routes; Felix's
# brokers with --insecure-no-tls, FELIX_E2E_INSECURE=1), as
# hack/bench-rounds.sh does by default. Needs the envtest binaries (make
# envtest-bins); FELIX_E2E_BIN=path runs another build of cmd/felix.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-2}"
DURATION="${DURATION:-8s}"
(cd hack/natsbench && go build -o ../../bin/natsbench . && go build -o ../../bin/nats-server github.com/nats-io/nats-server/v2)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
e2e="$work/e2e.test"
go test -c -o "$e2e" ./test/e2e

results="$work/results"
for ((i = 1; i <= ROUNDS; i++)); do
	echo "# round $i $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
	echo "round $i" >>"$results"
	for keys in 1 4; do
		for clients in 8 16; do
			echo "peer $keys $clients $(bin/natsbench --server bin/nats-server --duration "$DURATION" --counter-keys "$keys" --publishers "$clients" --sync-always)" >>"$results"
		done
	done
	(cd test/e2e && FELIX_E2E_INSECURE=1 FELIX_CLUSTER_BENCH_DURATION="$DURATION" "$e2e" -test.run XXX -test.bench 'ClusterCounterAdd' -test.benchtime 1x | grep '^Benchmark') >>"$results"
done
echo "# done $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$results" <<'PY'
import json, re, sys
rounds = []
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("round "):
        rounds.append({})
    elif line.startswith("peer "):
        _, keys, clients, js = line.split(" ", 3)
        d = json.loads(js)
        rounds[-1][("peer", int(keys), int(clients))] = (d["recordsPerSec"], d["p99Ms"])
    elif line.startswith("Benchmark"):
        m = re.search(r"/(\d)shards?/clients(\d+)", line)
        recs = float(re.search(r"([\d.]+) records/s", line).group(1))
        p99 = float(re.search(r"([\d.]+) p99-ms", line).group(1))
        rounds[-1][("felix", int(m.group(1)), int(m.group(2)))] = (recs, p99)
print("round  counters  clients  felix adds/s  p99 ms  peer adds/s  p99 ms  felix/peer")
for i, r in enumerate(rounds, 1):
    for keys in (1, 4):
        for clients in (8, 16):
            f, p = r.get(("felix", keys, clients)), r.get(("peer", keys, clients))
            if f and p:
                print(f"{i:5d}  {keys:8d}  {clients:7d}  {f[0]:12,.0f}  {f[1]:6.1f}  {p[0]:11,.0f}  {p[1]:6.1f}  {f[0]/p[0]:9.2f}x")
PY
