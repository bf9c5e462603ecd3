#!/usr/bin/env bash
# Compares Felix with the peer under fsync-per-write durability in rounds
# that alternate them, so each ratio pairs runs minutes apart on the same
# machine: per round, the peer (NATS JetStream, R=3, --sync-always) with 16
# synchronous publishers and with 16 x 8 pipelined, then Felix's cluster
# harness (BenchmarkClusterQuorumAppend/OnCommit: three `felix broker`
# processes and `felix bench`) in the same two shapes, each both "direct"
# (`felix bench --broker` with the leader's address) and "routing"
# (`felix bench --bootstrap` with every broker's, the routing client).
# Prints one line per round with both figures and the ratios (the peer
# against Felix direct, as before), the range of each ratio, each run's
# CPU per record (servers plus client, warm-up included), then the
# routing client's figures: routing over direct and routing over the
# peer, per round. Unless SHARDS=0, each round also runs
# BenchmarkClusterQuorumShards (four shards through the routing client,
# their leadership spread over the three brokers, then all on one) and a
# SHARDS table compares the two.
#
#   hack/bench-rounds.sh                     # 4 rounds of 8 s runs
#   ROUNDS=6 DURATION=10s hack/bench-rounds.sh
#   FULL_PAGE_CACHE=1 hack/bench-rounds.sh   # memory full of page cache
#   TLS=1 hack/bench-rounds.sh               # both over mutual TLS
#   TLS=both hack/bench-rounds.sh            # each round both ways: the cost of TLS
#   SHARDS=0 hack/bench-rounds.sh            # without the multi-shard runs
#
# Without TLS both run in plaintext: the peer's client connections and
# routes, and Felix's brokers with --insecure-no-tls (FELIX_E2E_INSECURE=1;
# replication over the client port, no authentication). TLS=1 runs both as
# a secure deployment does: the peer with mutual TLS on client connections
# and cluster routes (natsbench --tls, a CA and certificates made for the
# run), Felix as the operator runs it (the harness's default): TLS with a
# FelixUser's client certificate on the client port, replication over the
# mutual-TLS peer port, every request authorized. TLS=both runs every
# round plaintext and then with TLS, and adds a table of what TLS costs
# each system (throughput and CPU per record, TLS over plaintext, per
# round).
#
# FULL_PAGE_CACHE=1 fills the machine's memory with clean page cache (a
# sparse file the size of the memory, read) before every run, so that the
# pages each run writes are recycled ones, as on a machine that has run for
# a while. On a virtual machine that hands free memory back to its host, a
# page used for the first time costs about ten times a recycled one
# (docs/performance.md, "New pages cost ten times reused ones"), and how
# much of it a run pays depends on how long ago the machine booted.
#
# Needs the envtest binaries (make envtest-bins). The harness builds
# cmd/felix from this tree; FELIX_E2E_BIN=path runs another build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-4}"
DURATION="${DURATION:-8s}"
(cd hack/natsbench && go build -o ../../bin/natsbench . && go build -o ../../bin/nats-server github.com/nats-io/nats-server/v2)
work="$(mktemp -d)" # a file system with a page cache (not tmpfs)
trap 'rm -rf "$work"' EXIT
e2e="$work/e2e.test"
go test -c -o "$e2e" ./test/e2e

fill=""
if [[ -n "${FULL_PAGE_CACHE:-}" ]]; then
	fill="$work/pagefill"
	# What the memory can hold besides what processes use, less 1 GiB.
	truncate -s "$(awk '/^MemAvailable:/ {print $2 - 1048576}' /proc/meminfo)k" "$fill"
fi
# fullcache re-reads the sparse file: every page of it that was reclaimed
# is in the page cache again.
fullcache() { if [[ -n "$fill" ]]; then cat "$fill" >/dev/null; fi; }

case "${TLS:-}" in
"" | 0) modes=(plain) ;;
both) modes=(plain tls) ;;
*) modes=(tls) ;;
esac

# peer MODE PENDING; felix MODE
peer() {
	local flags=()
	if [[ $1 == tls ]]; then flags=(--tls); fi
	fullcache
	bin/natsbench --server bin/nats-server --duration "$DURATION" --publishers 16 --pending "$2" --sync-always "${flags[@]}" | tail -1
}
# felix runs, per shape, direct then routing on one cluster; then, unless
# SHARDS=0, the multi-shard layouts (spread, then oneleader, on one cluster).
felix() {
	local insecure=1
	if [[ $1 == tls ]]; then insecure=0; fi
	for shape in sync16 pipelined; do
		fullcache
		(cd test/e2e && FELIX_E2E_INSECURE=$insecure FELIX_CLUSTER_BENCH_DURATION="$DURATION" "$e2e" -test.run XXX -test.bench "ClusterQuorumAppend/OnCommit/$shape\$" -test.benchtime 1x | grep '^Benchmark')
	done
	if [[ ${SHARDS:-1} != 0 ]]; then
		for shape in sync16 pipelined; do
			fullcache
			(cd test/e2e && FELIX_E2E_INSECURE=$insecure FELIX_CLUSTER_BENCH_DURATION="$DURATION" "$e2e" -test.run XXX -test.bench "ClusterQuorumShards/$shape\$" -test.benchtime 1x | grep '^Benchmark')
		done
	fi
}

results="$work/results"
for ((i = 1; i <= ROUNDS; i++)); do
	echo "round $i" >>"$results"
	for mode in "${modes[@]}"; do
		echo "# round $i $mode $(date -u +%TZ) load $(cut -d' ' -f1 /proc/loadavg)" >&2
		{
			echo "mode $mode"
			echo "peer-sync16 $(peer "$mode" 1)"
			echo "peer-pipelined $(peer "$mode" 8)"
			felix "$mode"
		} >>"$results"
	done
done
python3 - "$results" <<'PY'
import json, re, sys
rounds, cur, mode = [], None, None
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("round "):
        rounds.append({})
    elif line.startswith("mode "):
        mode = line.split()[1]
        cur = rounds[-1].setdefault(mode, {})
    elif line.startswith("peer-"):
        shape, js = line.split(" ", 1)
        d = json.loads(js)
        cur[shape] = (d["recordsPerSec"], d["mbPerSec"],
                      d.get("serversCpuMicrosPerRecord", 0) + d.get("clientCpuMicrosPerRecord", 0))
    elif line.startswith("Benchmark"):
        shape = "felix-sync16" if "/sync16" in line else "felix-pipelined"
        if line.startswith("BenchmarkClusterQuorumShards"):
            shape = shape.replace("felix-", "shards-") + ("-spread" if "/spread" in line else "-oneleader")
        elif "/routing" in line:
            shape += "-routing"
        recs = float(re.search(r"([\d.]+) records/s", line).group(1))
        mb = float(re.search(r"([\d.]+) MB/s", line).group(1))
        cpu = sum(float(m.group(1)) for m in re.finditer(r"([\d.]+) (?:brokers|client)-cpu-µs/record", line))
        cur[shape] = (recs, mb, cpu)

def median(v):
    v = sorted(v)
    return v[len(v)//2] if len(v) % 2 else (v[len(v)//2-1] + v[len(v)//2]) / 2

modes = [m for m in ("plain", "tls") if all(m in r for r in rounds)]
for m in modes:
    print(f"mode: {m} ({'both over mutual TLS' if m == 'tls' else 'both in plaintext'})")
    ratios = {"sync16": [], "pipelined": []}
    print("round  peer sync16  felix sync16  ratio  peer 16x8 MB/s  felix 16x8 MB/s  ratio")
    for i, rr in enumerate(rounds, 1):
        r = rr[m]
        s = r["felix-sync16"][0] / r["peer-sync16"][0]
        p = r["felix-pipelined"][1] / r["peer-pipelined"][1]
        ratios["sync16"].append(s)
        ratios["pipelined"].append(p)
        print(f"{i:5d}  {r['peer-sync16'][0]:11,.0f}  {r['felix-sync16'][0]:12,.0f}  {s:4.2f}x  {r['peer-pipelined'][1]:14.1f}  {r['felix-pipelined'][1]:15.1f}  {p:4.2f}x")
    print()
    print("CPU per record, servers and client (µs): a window where both use most of the")
    print("machine is CPU-bound, and there the throughput ratio follows the CPU ratio")
    print("round  peer sync16  felix sync16  peer 16x8  felix 16x8")
    for i, rr in enumerate(rounds, 1):
        r = rr[m]
        print(f"{i:5d}  {r['peer-sync16'][2]:11,.0f}  {r['felix-sync16'][2]:12,.0f}  {r['peer-pipelined'][2]:9,.0f}  {r['felix-pipelined'][2]:10,.0f}")
    for k, v in ratios.items():
        v.sort()
        print(f"{k}: ratio {v[0]:.2f} - {v[-1]:.2f}x, median {median(v):.2f}x")
    print()
    if all("felix-sync16-routing" in rr[m] and "felix-pipelined-routing" in rr[m] for rr in rounds):
        print("The routing client (felix bench --bootstrap, every broker) against direct (--broker, the leader)")
        print("round  sync16 direct  routing  ÷direct  ÷peer  16x8 MB/s direct  routing  ÷direct  ÷peer")
        rr_ratios = {"sync16 routing÷direct": [], "sync16 routing÷peer": [], "16x8 routing÷direct": [], "16x8 routing÷peer": []}
        for i, rr in enumerate(rounds, 1):
            r = rr[m]
            sd, sr, sp = r["felix-sync16"][0], r["felix-sync16-routing"][0], r["peer-sync16"][0]
            pd, pr, pp = r["felix-pipelined"][1], r["felix-pipelined-routing"][1], r["peer-pipelined"][1]
            rr_ratios["sync16 routing÷direct"].append(sr / sd)
            rr_ratios["sync16 routing÷peer"].append(sr / sp)
            rr_ratios["16x8 routing÷direct"].append(pr / pd)
            rr_ratios["16x8 routing÷peer"].append(pr / pp)
            print(f"{i:5d}  {sd:13,.0f}  {sr:7,.0f}  {sr/sd:6.2f}x  {sr/sp:4.2f}x  {pd:16.1f}  {pr:7.1f}  {pr/pd:6.2f}x  {pr/pp:4.2f}x")
        for k, v in rr_ratios.items():
            v.sort()
            print(f"{k}: {v[0]:.2f} - {v[-1]:.2f}x, median {median(v):.2f}x")
        print()
    if all(f"shards-{s}-{l}" in rr[m] for rr in rounds for s in ("sync16", "pipelined") for l in ("spread", "oneleader")):
        print(f"SHARDS: four shards through the routing client, leaders spread over the brokers or all on one")
        print("round  sync16 spread  oneleader  spread÷one  16x8 MB/s spread  oneleader  spread÷one")
        sp_ratios = {"sync16": [], "16x8": []}
        for i, rr in enumerate(rounds, 1):
            r = rr[m]
            a, b = r["shards-sync16-spread"][0], r["shards-sync16-oneleader"][0]
            c, d = r["shards-pipelined-spread"][1], r["shards-pipelined-oneleader"][1]
            sp_ratios["sync16"].append(a / b)
            sp_ratios["16x8"].append(c / d)
            print(f"{i:5d}  {a:13,.0f}  {b:9,.0f}  {a/b:9.2f}x  {c:16.1f}  {d:9.1f}  {c/d:9.2f}x")
        for k, v in sp_ratios.items():
            v.sort()
            print(f"{k} spread÷oneleader: {v[0]:.2f} - {v[-1]:.2f}x, median {median(v):.2f}x")
        print()
if len(modes) == 2:
    print("TLS over plaintext, same round (throughput: records/s; cpu: per record)")
    keys = ["peer-sync16", "felix-sync16", "peer-pipelined", "felix-pipelined"]
    print("round  " + "  ".join(f"{k:>24}" for k in keys))
    cost = {k: ([], []) for k in keys}
    for i, rr in enumerate(rounds, 1):
        cells = []
        for k in keys:
            t, c = rr["tls"][k][0] / rr["plain"][k][0], rr["tls"][k][2] / rr["plain"][k][2]
            cost[k][0].append(t)
            cost[k][1].append(c)
            cells.append(f"{t:5.2f}x thr {c:5.2f}x cpu")
        print(f"{i:5d}  " + "  ".join(f"{c:>24}" for c in cells))
    print("median " + "  ".join(f"{median(cost[k][0]):5.2f}x thr {median(cost[k][1]):5.2f}x cpu".rjust(24) for k in keys))
PY
