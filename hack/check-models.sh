#!/usr/bin/env bash
# Check the SPIN models in formal/: every passing configuration must report
# no error, and every twin (a passing configuration with one rule switched
# off) must fail with the invariant it is expected to break. A twin that
# stops failing, or fails with another invariant, fails this script.
#
# Usage: hack/check-models.sh [--full] [--list] [CONFIG]
#   --full   also run the deeper configurations (see formal/README.md)
#   --list   print the configurations and exit
#   CONFIG   run only this configuration (e.g. FelixHeadTrimUntagged)
#
# Environment: MODELS_MEMLIM (MB) caps each pan run's memory: 4096 by
# default, 8192 with --full (the deepest identity runs need about 6 GB).
# Compiling pan.c dominates a twin's time, so twins are compiled with -O0
# and passing configurations with -O1 (MODELS_CFLAGS_TWIN, MODELS_CFLAGS_PASS).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FORMAL="$ROOT/formal"
CFLAGS_TWIN="${MODELS_CFLAGS_TWIN:--O0}"
CFLAGS_PASS="${MODELS_CFLAGS_PASS:--O1}"

full=0
list=0
only=""
for arg in "$@"; do
	case "$arg" in
	--full) full=1 ;;
	--list) list=1 ;;
	-h | --help)
		sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	-*)
		echo "check-models: unknown flag $arg" >&2
		exit 2
		;;
	*) only="$arg" ;;
	esac
done

# name | model | spin defines | expected (PASS or the invariant) | depth
# depth: default (always run) or full (only with --full or by name).
CONFIGS=(
	# FelixHeadTrim (seed 004): 3 brokers, 2 holders, 1 write, 2 trims, 1 failover (with its fence),
	# followers one commit behind, resets at the leader's start (issue 30 item 3).
	"FelixHeadTrim|FelixHeadTrim|-DMAXW=1 -DMAXT=2|PASS|default"
	"FelixHeadTrimAckLeaderTrim|FelixHeadTrim|-DMAXW=1 -DMAXT=2 -DACK_LEADER_TRIM|NoReadBelowTrim|default"
	"FelixHeadTrimServeBeforeFence|FelixHeadTrim|-DMAXW=1 -DMAXT=2 -DSERVE_BEFORE_FENCE|NoReadBelowTrim|default"
	"FelixHeadTrimResetDropsFloor|FelixHeadTrim|-DMAXW=1 -DMAXT=2 -DRESET_DROPS_FLOOR|FloorNeverBack|default"
	# 1 write, 1 trim, 1 failover, 1 broker crash.
	"FelixHeadTrimCrash|FelixHeadTrim|-DMAXW=1 -DMAXT=1 -DMAXC=1|PASS|default"
	# The seed's trace: 2 writes, 2 trims, no failover.
	"FelixHeadTrimHolders|FelixHeadTrim|-DMAXE=0 -DMAXT=2|PASS|default"
	"FelixHeadTrimUntagged|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DUNTAGGED|StaleTrimRefused|default"
	"FelixHeadTrimHiddenTrims|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DHIDDEN_TRIMS|StaleTrimRefused|default"
	"FelixHeadTrimNoOpSkipsCheck|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DNOOP_SKIPS_CHECK|StaleTrimRefused|default"
	"FelixHeadTrimRetentionOn|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DRETENTION_ON -DNO_INDEX_LOSS|StaleTrimRefused|default"
	"FelixHeadTrimRetentionOnIndexLoss|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DRETENTION_ON|FloorRecordKept|default"
	"FelixHeadTrimReadFromEarliest|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DREAD_FROM_EARLIEST|StaleTrimRefused|default"
	"FelixHeadTrimTailFromRefusal|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DTAIL_FROM_REFUSAL|StaleTrimRefused|default"
	"FelixHeadTrimDeleteAtFloor|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DDELETE_AT_FLOOR|FloorRecordKept|default"
	"FelixHeadTrimStartFromSegments|FelixHeadTrim|-DMAXE=0 -DMAXT=2 -DSTART_FROM_SEGMENTS|NoReadBelowTrim|default"
	# Deeper: the seed's bounds without failover; 2 failovers; a crash with 2 trims; 2 writes with a failover.
	"FelixHeadTrimHoldersDeep|FelixHeadTrim|-DMAXE=0|PASS|full"
	"FelixHeadTrimDeep|FelixHeadTrim|-DMAXW=1 -DMAXT=2 -DMAXE=2|PASS|full"
	"FelixHeadTrimCrashDeep|FelixHeadTrim|-DMAXW=1 -DMAXT=2 -DMAXC=1|PASS|full"
	"FelixHeadTrimWide|FelixHeadTrim|-DMAXT=2|PASS|full"

	# FelixStorageIdentity (seed 000): 5 replicas, Quorum, 1 record, 2 faults.
	"FelixStorageIdentity|FelixStorageIdentity|-DMAXF=2 -DMAXR=0|PASS|default"
	"FelixStorageIdentityNoCursorReset|FelixStorageIdentity|-DMAXF=2 -DMAXR=0 -DNO_CURSOR_RESET|NoAckedLoss|default"
	"FelixStorageIdentityPlacementIgnoresIds|FelixStorageIdentity|-DMAXF=2 -DMAXR=0 -DPLACEMENT_IGNORES_IDS|NoAckedLoss|default"
	"FelixStorageIdentityHeldReportAnyId|FelixStorageIdentity|-DMAXF=2 -DMAXR=0 -DHELD_REPORT_ANY_ID|NoAckedLoss|default"
	"FelixStorageIdentityFenceCountsChangedId|FelixStorageIdentity|-DMAXF=2 -DMAXR=0 -DFENCE_COUNTS_CHANGED_ID|NoAckedLoss|default"
	"FelixStorageIdentityNoRestoreRotation|FelixStorageIdentity|-DMAXF=2 -DMAXR=0 -DNO_RESTORE_ROTATION|NoAckedLoss|default"
	# 5 replicas, 1 fault, 1 clean restart.
	"FelixStorageIdentityRestart|FelixStorageIdentity|-DMAXF=1 -DMAXR=1|PASS|default"
	"FelixStorageIdentityOldEpochAccepted|FelixStorageIdentity|-DMAXF=1 -DMAXR=1 -DOLD_EPOCH_ACCEPTED|NoAckedLoss|default"
	# 3 replicas, 2 records, 2 fault events (1 after an acknowledgement), 1 restart, 2 placements.
	"FelixStorageIdentity3|FelixStorageIdentity|-DREPLICAS=3 -DMAXW=2 -DMAXF=2 -DMAXR=1 -DMAXE=2|PASS|default"
	# 5 replicas, 3 fault events (one before an acknowledgement), 2 placements.
	"FelixStorageIdentityStaleQuorum|FelixStorageIdentity|-DMAXF=3 -DMAXE=2 -DMAXR=0 -DSTALE_QUORUM|NoAckedLoss|default"
	"FelixStorageIdentityDeep|FelixStorageIdentity|-DMAXF=3 -DMAXE=2 -DMAXR=0|PASS|full"
	# Deeper: 5 replicas, 2 faults and a clean restart.
	"FelixStorageIdentityRestartDeep|FelixStorageIdentity|-DMAXF=2 -DMAXR=1|PASS|full"
	# Deeper: 5 replicas, 2 records, 2 faults.
	"FelixStorageIdentityTwoRecords|FelixStorageIdentity|-DMAXW=2 -DMAXF=2 -DMAXR=0|PASS|full"

	# Crash rules [ID-3] (-DCRASHES): unclean stops are the replica events
	# (no wipes or restores), 5 replicas, 1 record, 2 faults, 1 unclean stop,
	# the cluster starting in periodic/none.
	"FelixStorageIdentityCrash|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=0 -DMAXC=1|PASS|default"
	"FelixStorageIdentityUncleanKeepsAnyMode|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=0 -DMAXC=1 -DUNCLEAN_KEEPS_ANY_MODE|NoAckedLoss|default"
	"FelixStorageIdentityConfiguredModeDecides|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=0 -DMAXC=1 -DCONFIGURED_MODE_DECIDES|NoAckedLoss|default"
	"FelixStorageIdentityIgnoreBootId|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=0 -DMAXC=1 -DIGNORE_BOOT_ID|NoAckedLoss|default"
	"FelixStorageIdentityIgnoreSyncfsFailure|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=0 -DMAXC=1 -DIGNORE_SYNCFS_FAILURE|NoAckedLoss|default"
	"FelixStorageIdentityUnknownBootKeepsId|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=0 -DMAXC=1 -DUNKNOWN_BOOT_KEEPS_ID|NoAckedLoss|default"
	"FelixStorageIdentityUnknownRunStateKeepsId|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=0 -DMAXC=1 -DUNKNOWN_RUN_STATE_KEEPS_ID|NoAckedLoss|default"
	# The same, the cluster starting in on-commit.
	"FelixStorageIdentityCrashOnCommit|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=0 -DMAXF=2 -DMAXR=0 -DMAXC=1|PASS|default"
	"FelixStorageIdentityOnCommitAnswersUnsynced|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=0 -DMAXF=2 -DMAXR=0 -DMAXC=1 -DON_COMMIT_ANSWERS_UNSYNCED|NoAckedLoss|default"
	# A clean stop in periodic/none, with a power cut while the broker is down.
	"FelixStorageIdentityCrashCleanStop|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=1 -DMAXC=0|PASS|default"
	"FelixStorageIdentityCleanStopSkipsSync|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=1 -DMAXC=0 -DCLEAN_STOP_SKIPS_SYNC|NoAckedLoss|default"
	# Deeper: both start modes, wipes and restores too; two unclean stops.
	"FelixStorageIdentityCrashDeep|FelixStorageIdentity|-DCRASHES -DMAXF=2 -DMAXR=0 -DMAXC=1|PASS|full"
	"FelixStorageIdentityCrashTwice|FelixStorageIdentity|-DCRASHES -DCRASHES_ONLY -DSTART_MODE=1 -DMAXF=2 -DMAXR=0 -DMAXC=2|PASS|full"
)

if [[ $full == 1 ]]; then
	MEMLIM="${MODELS_MEMLIM:-8192}"
else
	MEMLIM="${MODELS_MEMLIM:-4096}"
fi

if [[ $list == 1 ]]; then
	printf '%-44s %-22s %-18s %s\n' CONFIG MODEL EXPECTED DEFINES
	for c in "${CONFIGS[@]}"; do
		IFS='|' read -r name model defs expect depth <<<"$c"
		printf '%-44s %-22s %-18s %s%s\n' "$name" "$model" "$expect" "$defs" \
			"$([[ $depth == full ]] && echo ' (--full)')"
	done
	exit 0
fi

if [[ -n $only ]]; then
	found=0
	for c in "${CONFIGS[@]}"; do
		[[ ${c%%|*} == "$only" ]] && found=1
	done
	if [[ $found == 0 ]]; then
		echo "check-models: no configuration named $only (see --list)" >&2
		exit 2
	fi
fi

if ! command -v spin >/dev/null 2>&1; then
	echo "check-models: installing spin" >&2
	sudo=""
	[[ $(id -u) != 0 ]] && sudo="sudo"
	$sudo apt-get update >/dev/null && $sudo apt-get install -y spin >/dev/null
fi
CC="${CC:-gcc}"
command -v "$CC" >/dev/null 2>&1 || {
	echo "check-models: $CC is needed to compile pan" >&2
	exit 2
}

work="$(mktemp -d "${TMPDIR:-/tmp}/felix-models.XXXXXX")"
trap 'rm -rf "$work"' EXIT

rows=()
fail=0
start_all=$(date +%s.%N)

for c in "${CONFIGS[@]}"; do
	IFS='|' read -r name model defs expect depth <<<"$c"
	if [[ -n $only ]]; then
		[[ $name == "$only" ]] || continue
	elif [[ $depth == full && $full == 0 ]]; then
		continue
	fi
	dir="$work/$name"
	mkdir -p "$dir"
	cp "$FORMAL/$model.pml" "$dir/"
	t0=$(date +%s.%N)
	cflags="$CFLAGS_TWIN"
	[[ $expect == PASS ]] && cflags="$CFLAGS_PASS"
	result=""
	states="-"
	# shellcheck disable=SC2086 # defs is a list of -D flags
	if ! (cd "$dir" && spin $defs -a "$model.pml" >spin.txt 2>&1); then
		result="SPIN ERROR"
		sed 's/^/    /' "$dir/spin.txt" >&2
	elif ! (cd "$dir" && "$CC" $cflags -w -DSAFETY -DNOREDUCE -DMEMLIM="$MEMLIM" -o pan pan.c >cc.txt 2>&1); then
		result="CC ERROR"
		sed 's/^/    /' "$dir/cc.txt" >&2
	else
		hash="-w24"
		[[ $depth == full ]] && hash="-w26"
		(cd "$dir" && ./pan -m200000 "$hash" >pan.txt 2>&1) || true
		out="$dir/pan.txt"
		states=$(awk '/states, stored/ {print $1; exit}' "$out")
		states=${states:--}
		errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -1)
		violated=$(sed -n 's/.*assertion violated \([A-Za-z0-9_]*\).*/\1/p' "$out" | head -1)
		if grep -q 'max search depth too small' "$out"; then
			result="DEPTH TOO SMALL"
		elif grep -q 'out of memory\|MEMLIM' "$out"; then
			result="OUT OF MEMORY"
		elif [[ -z $errors ]]; then
			result="NO RESULT"
			tail -5 "$out" | sed 's/^/    /' >&2
		elif [[ $expect == PASS ]]; then
			if [[ $errors == 0 ]]; then
				result="PASS"
			else
				result="FAILED ${violated:-error}"
			fi
		elif [[ $errors == 0 ]]; then
			result="TWIN PASSED"
		else
			# The trail must name the same invariant when replayed.
			# shellcheck disable=SC2086
			trail=$(cd "$dir" && spin $defs -t "$model.pml" 2>&1 |
				sed -n 's/.*text of failed assertion: assert(\([A-Za-z0-9_]*\)).*/\1/p' | head -1)
			if [[ $violated == "$expect" && $trail == "$expect" ]]; then
				result="FAILED $expect"
			else
				result="WRONG ${violated:-?}/${trail:-?}"
			fi
		fi
	fi
	t1=$(date +%s.%N)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
	ok=0
	if [[ $expect == PASS && $result == PASS ]] || [[ $expect != PASS && $result == "FAILED $expect" ]]; then
		ok=1
	fi
	if [[ $ok == 0 ]]; then
		fail=1
		if [[ $result == "TWIN PASSED" ]]; then
			echo "check-models: twin $name no longer fails: the rule it removes is not needed any more, or the model lost the behaviour that breaks $expect" >&2
		elif [[ $expect != PASS ]]; then
			echo "check-models: twin $name was expected to break $expect, got: $result" >&2
		else
			echo "check-models: $name was expected to pass, got: $result (trail in the summary below)" >&2
			(cd "$dir" && [[ -f $model.pml.trail ]] && spin $defs -t "$model.pml" 2>&1 | grep -E 'MSC|assert' | sed 's/^ */    /' >&2) || true
		fi
	fi
	mark=$([[ $ok == 1 ]] && echo ok || echo DEVIATION)
	rows+=("$(printf '%-44s %-18s %-26s %12s %8s  %s' "$name" "$expect" "$result" "$states" "$secs" "$mark")")
	echo "${rows[-1]}" >&2
done

end_all=$(date +%s.%N)
echo
printf '%-44s %-18s %-26s %12s %8s\n' CONFIG EXPECTED RESULT STATES SECONDS
for r in "${rows[@]}"; do
	echo "$r"
done
awk -v a="$start_all" -v b="$end_all" 'BEGIN {printf "total: %.1f s\n", b - a}'
if [[ $fail != 0 ]]; then
	echo "check-models: FAILED (see DEVIATION rows)" >&2
	exit 1
fi
echo "check-models: all configurations as expected"
