/*
 * FelixStorageIdentity: storage identity per data directory (seed 000,
 * "The follower that forgot"), checked by SPIN.
 *
 * One shard with REPLICAS replicas (5 by default, -DREPLICAS=3 for three)
 * and Quorum acknowledgement. A leader keeps a cursor per follower (the
 * confirmed position and the storage id it was learned under), runs passes
 * of exchanges (idle ones included), recounts the quorum mark as each
 * exchange lands, and reports to the control plane. The control plane keeps
 * the registry (storage id, incarnation), marks a dead leader down, places
 * a new leader from the report, and the new leader fences at a new epoch.
 * Replicas are wiped (new id), restarted cleanly (same id) and restored
 * from an old copy (registration behind the control plane).
 *
 * The model is one process whose do-loop picks one enabled action per step.
 * Every action is a d_step; the invariant is evaluated at its end (Check).
 *
 * Invariant (the assert names it, so pan and `spin -t` print the name):
 *   NoAckedLoss  every record a leader acknowledged is in the serving
 *                leader's log at its position, and no position is
 *                acknowledged with two different records, for every
 *                record acknowledged before at most FAULTS later faults
 *                (2 of 5, 1 of 3). A fault is a leader death, a wipe, a
 *                restore, or (-DCRASHES) a stop that loses records; faults before a record's acknowledgement do not
 *                count against it (Quorum promised FAULTS+1 copies at the
 *                acknowledgement, which must survive FAULTS faults),
 *                except the acknowledging leader's own down marking.
 *
 * Symmetry: the followers 1..N-1 start alike, so the model names them in
 * the order they are first hit by a wipe, restore or restart (follower r
 * can be hit only once r-1 has been); every run is a renaming of one of
 * these. Replica 0 is the first leader.
 *
 * Switches: each -D macro removes one rule; the twin with it must fail.
 *   -DNO_CURSOR_RESET          [RP-3] a new id is recorded in the cursor but
 *                              the confirmed position is kept.
 *   -DSTALE_QUORUM             [RP-5] the quorum mark counts followers that
 *                              did not answer in this pass.
 *   -DPLACEMENT_IGNORES_IDS    [CP-1] placement does not compare the
 *                              reported id with the registered id.
 *   -DHELD_REPORT_ANY_ID       [CP-2] a dead leader's held report counts for
 *                              a follower whose id changed.
 *   -DFENCE_COUNTS_CHANGED_ID  [fence] the fence counts a replica whose id
 *                              differs from the id it was counted under.
 *   -DNO_RESTORE_ROTATION      [ID-3] a directory restored from before the
 *                              last registration keeps its id.
 *   -DOLD_EPOCH_ACCEPTED       [ID-4] a restarted replica accepts shipping
 *                              from an old epoch (does not learn the
 *                              current epoch from the control plane first).
 *
 * Crash rules (-DCRASHES): a replica's run has an fsync mode (on-commit, or
 * page-cache: periodic and none, which the decision treats alike); what it
 * holds is split into the page cache (lg, tl) and the disk (dk, dt):
 * under on-commit every write is synced before it is counted or answered,
 * under a page-cache mode it reaches the disk at a stop's sync, at the
 * syncfs of a restart, or (a power cut chooses) by writeback before a cut.
 * A replica may stop uncleanly: its process dies (the page cache
 * survives, or writeback fails and the kernel drops the dirty pages) or
 * the machine loses power (the page cache is lost, the boot id changes).
 * The restart applies the unclean-stop rows of datadir.Decide to the facts
 * it can see (the run-state record, the boot ids, the syncfs result).
 * Twins, each with -DCRASHES:
 *   -DUNCLEAN_KEEPS_ANY_MODE    [ID-3] an unclean stop keeps the id under
 *                              every fsync mode, as under on-commit.
 *   -DCONFIGURED_MODE_DECIDES   [ID-3] the decision reads the mode the new
 *                              run is configured with, not the mode of the
 *                              run that crashed (the run-state's).
 *   -DIGNORE_BOOT_ID            [ID-3] a changed boot id does not rotate.
 *   -DIGNORE_SYNCFS_FAILURE     [ID-3] a failed syncfs does not rotate.
 *   -DUNKNOWN_BOOT_KEEPS_ID     [ID-3] an unknown boot id counts as the same
 *                              boot.
 *   -DUNKNOWN_RUN_STATE_KEEPS_ID [ID-3] a missing or corrupt run-state counts
 *                              as a clean stop.
 *   -DCLEAN_STOP_SKIPS_SYNC     [ID-3] a graceful stop writes clean-stop
 *                              without syncing the stores first.
 *   -DON_COMMIT_ANSWERS_UNSYNCED  an on-commit follower answers before its
 *                              write is synced (what the on-commit row
 *                              relies on; docs/durable-storage.md).
 *
 * Bounds (override with -D): MAXW writes (log positions), MAXF fault
 * events in all (FAULTS+1 by default, so one may precede an
 * acknowledgement), MAXR clean restarts, MAXE placements, MAXC unclean
 * stops (with -DCRASHES; one that loses records is also a fault).
 * With -DCRASHES: -DSTART_MODE=0 or 1 fixes the cluster's fsync mode at
 * the start (else both are explored); -DCRASHES_ONLY leaves out wipes and
 * restores (checked by the configurations without -DCRASHES), so unclean
 * stops and clean restarts are the only replica events.
 *
 * Run: hack/check-models.sh (see formal/README.md).
 */

#ifndef REPLICAS
#define REPLICAS 5
#endif
#define N REPLICAS
#if N == 5
#define Q 3                  /* Quorum acknowledgement: a majority */
#ifndef FAULTS
#define FAULTS 2
#endif
#else
#define Q 2
#ifndef FAULTS
#define FAULTS 1
#endif
#endif
#ifndef MAXW
#define MAXW 1
#endif
#ifndef MAXF
#define MAXF (FAULTS + 1)
#endif
#ifndef MAXR
#define MAXR 1
#endif
#ifndef MAXE
#define MAXE 1
#endif
#define P MAXW               /* log positions 1..P */
#ifdef CRASHES
#ifndef MAXC
#define MAXC 1
#endif
#endif

/* A log packs into a byte: 2 bits per position, the epoch the record was
 * written at (0 = no record). Positions run 1..P from the shard's base. */
#define EP(b, p)   ((lg[b] >> (2 * ((p) - 1))) & 3)
#define AK(p)      ((ak >> (2 * ((p) - 1))) & 3)

/* Replicas (the broker's data directory and process). */
byte lg[N];          /* the log */
byte tl[N];          /* its tail: last position held */
byte sid[N];         /* storage id in <data dir>/storage-id [ID-1]; ids are
                      * compared only for the same replica, so replica r's
                      * ids are r+1, r+1+N, r+1+2N, ... (a new one per
                      * rotation), which keeps symmetric runs one state */
bool behind[N];      /* <data dir>/registration is behind the control
                      * plane's incarnation for the node [ID-2]: the model
                      * only ever compares the two numbers, so it keeps the
                      * comparison (set by a restore, cleared on register) */
byte repoch[N];      /* the epoch it accepts shipping from (at least) */
bool dead[N];        /* process not running (only a dead leader) */
#ifdef CRASHES
byte dk[N], dt[N];   /* the log and tail on disk; lg and tl are what the
                      * process and the page cache hold */
bit md[N];           /* fsync mode of the current run, as its run-state
                      * records it: 0 on-commit, 1 periodic or none */
byte nc;             /* bound: unclean stops */
#endif

/* Control plane. */
byte reg[N];         /* registered storage id */
bool down[N];        /* marked down (heartbeat lapsed) */
byte ldr;            /* assignment: leader */
byte ep = 1;         /* assignment: epoch */

/* The leader's last report [RP-6]. */
bool rvalid, rfresh;
byte rby, rmark;     /* the report's leader, its acknowledged mark */
byte rpos[N], rid[N];

/* Leader processes: slot 0 is the assigned leader, slot 1 a deposed leader
 * that is still running and still believes it leads (at most one is
 * tracked). Cursors per follower [RP-1]: the confirmed position and the
 * id it was learned under. */
bool act[2];
byte who[2], lep[2], mk[2];
byte cpos[2 * N], cid[2 * N];

/* Ghost: the acknowledged records, packed like a log. */
byte ak;

byte nw, nf, nr, ne; /* bounds: writes, faults, clean restarts, placements */
byte fsa[P + 1];     /* faults since position p was acknowledged (capped) */
byte hit;            /* followers hit by a replica event (symmetry) */

hidden byte i, j, m, x, y, best, votes, bad, idx, ok, rot;
hidden byte NoAckedLoss = 1;

inline Check() {
	NoAckedLoss = (bad == 0);
	bad = 0;
	if
	:: act[0] && !dead[ldr] ->
		for (i : 1 .. P) {
			if
			:: AK(i) != 0 && fsa[i] <= FAULTS && (tl[ldr] < i || EP(ldr, i) != AK(i)) -> NoAckedLoss = 0
			:: else -> skip
			fi
		}
	:: else -> skip
	fi;
	assert(NoAckedLoss)
}

/* Disk and page cache (-DCRASHES). SYNCED(r): everything replica r holds
 * is on disk. COMMIT_SYNC(r): under on-commit a write is synced before it
 * is acknowledged or answered; under periodic/none it stays in the page
 * cache. Background syncs and kernel writeback are not separate steps: a
 * power cut chooses whether the page cache had reached the disk since the
 * last full sync (all or nothing; exact for one record, see CRASH). */
#ifdef CRASHES
#define SYNCED(r) \
	if \
	:: DISK_LIVE -> dk[r] = lg[r]; dt[r] = tl[r] \
	:: else -> skip \
	fi
#define DIRTY(r) (dk[r] != lg[r] || dt[r] != tl[r])
#define COMMIT_SYNC(r) \
	if \
	:: md[r] == 0 -> SYNCED(r) \
	:: else -> skip \
	fi
#ifdef ON_COMMIT_ANSWERS_UNSYNCED
#define ANSWER_SYNC(r) skip
#else
#define ANSWER_SYNC(r) COMMIT_SYNC(r)
#endif
/* Dead variables: once no unclean stop or clean restart is left in the
 * bounds, nothing reads dk, dt or md again, so they are cleared (a sound
 * reduction: states that differ only there have the same futures). */
#define DISK_LIVE (nc < MAXC || nr < MAXR)
inline ForgetDisk() {
	if
	:: !DISK_LIVE ->
		for (i : 0 .. N - 1) { dk[i] = 0; dt[i] = 0; md[i] = 0 }
	:: else -> skip
	fi
}
#else
#define SYNCED(r) skip
#define COMMIT_SYNC(r) skip
#define ANSWER_SYNC(r) skip
#endif

/* [RP-5] Recount the quorum mark of leader slot s after a pass in which
 * the followers in `mask` answered: a position counts a follower only if
 * it answered in this pass (over a connection whose id matches its cursor:
 * a pass member's cursor id equals its presented id); every other
 * follower, down ones included, holds nothing. The leader counts itself.
 * The mark never moves back; every position under it is acknowledged. */
inline Recount(s, mask) {
	x = 0;
	for (i : 1 .. P) {
		votes = 1;
		for (j : 0 .. N - 1) {
			if
#ifdef STALE_QUORUM
			:: j != who[s] && cpos[s * N + j] >= i -> votes++
#else
			:: j != who[s] && cpos[s * N + j] >= i && (mask & (1 << j)) != 0 -> votes++
#endif
			:: else -> skip
			fi
		};
		if
		:: i <= tl[who[s]] && votes >= Q -> x = i
		:: else -> skip
		fi
	};
	if
	:: x > mk[s] ->
		mk[s] = x;
		for (i : 1 .. P) {
			if
			:: i <= x && AK(i) == 0 ->
				ak = ak | (EP(who[s], i) << (2 * (i - 1)));
				/* a leader already marked down acknowledges with a
				 * copy that is already faulty: that fault counts */
				fsa[i] = (down[who[s]] -> 1 : 0);
				printf("MSC: leader %d (epoch %d) acknowledges position %d\n", who[s], lep[s], i)
			:: i <= x && AK(i) != 0 && AK(i) != EP(who[s], i) && fsa[i] <= FAULTS -> bad = 1
			:: else -> skip
			fi
		}
	:: else -> skip
	fi
}

/* A client write lands at leader slot s. */
#define WRITE(s) \
	:: d_step { act[s] && nw < MAXW && tl[who[s]] < P -> \
		tl[who[s]]++; \
		lg[who[s]] = lg[who[s]] | (lep[s] << (2 * (tl[who[s]] - 1))); \
		nw++; \
		COMMIT_SYNC(who[s]); \
		printf("MSC: leader %d (epoch %d) appends position %d\n", who[s], lep[s], tl[who[s]]); \
		Check() }

/* [RP-2][RP-3] An exchange starts by asking the connection which id the
 * follower presented; a different id resets the cursor to the base with
 * nothing confirmed. */
#ifdef NO_CURSOR_RESET
#define RESET_CURSOR(idx) skip
#else
#define RESET_CURSOR(idx) cpos[idx] = 0
#endif
#define LOOKUP(s, f) \
	:: d_step { act[s] && f != who[s] && !dead[f] && cid[s * N + f] != sid[f] -> \
		cid[s * N + f] = sid[f]; \
		RESET_CURSOR(s * N + f); \
		printf("MSC: leader %d learns id %d for %d, cursor %d\n", who[s], sid[f], f, cpos[s * N + f]); \
		Check() }

/* [RP-4] A pass of leader slot s in which the followers in `mask` answer
 * (the others are slow, partitioned or refuse). Each exchange ships what
 * the cursor says is missing (nothing on an idle shard) and the follower
 * always answers where it really is: it accepts only if it holds the
 * record at the cursor at the same epoch, else it answers that it is
 * behind and the cursor returns to the base. A member must present the id
 * its cursor holds (the lookup came first) and accept the leader's epoch.
 * The exchanges of a pass run concurrently; the mark is recounted once
 * they have all landed, which gives the same mark as recounting as each
 * one lands, since the mark only rises. */
inline Exchange(s, f) {
	idx = s * N + f;
	if
	:: act[1] && s == 0 && who[1] == f -> act[1] = 0   /* deposed leader steps down */
	:: else -> skip
	fi;
	repoch[f] = lep[s];
	if
	:: cpos[idx] == 0 || (tl[f] >= cpos[idx] && EP(f, cpos[idx]) == EP(who[s], cpos[idx])) ->
		lg[f] = lg[who[s]]; tl[f] = tl[who[s]]; cpos[idx] = tl[f];
		ANSWER_SYNC(f)
	:: else -> cpos[idx] = 0
	fi
}
#define MEMBEROK(s, f, mask) ((mask & (1 << f)) == 0 || \
	(f != who[s] && !dead[f] && cid[s * N + f] == sid[f] && repoch[f] <= lep[s]))
#if N == 5
#define MEMBERSOK(s, mask) (MEMBEROK(s, 0, mask) && MEMBEROK(s, 1, mask) && \
	MEMBEROK(s, 2, mask) && MEMBEROK(s, 3, mask) && MEMBEROK(s, 4, mask))
#else
#define MEMBERSOK(s, mask) (MEMBEROK(s, 0, mask) && MEMBEROK(s, 1, mask) && MEMBEROK(s, 2, mask))
#endif
#define PASS(s, mask) \
	:: d_step { act[s] && MEMBERSOK(s, mask) -> \
		for (m : 0 .. N - 1) { \
			if \
			:: (mask & (1 << m)) != 0 -> Exchange(s, m) \
			:: else -> skip \
			fi \
		}; \
		printf("MSC: pass of leader %d (epoch %d): followers %d answer\n", who[s], lep[s], mask); \
		Recount(s, mask); \
		Check() }

/* [RP-6] The assigned leader reports, per follower, the confirmed position
 * and the id it was counted under, against its acknowledged mark. */
#define REPORT \
	:: d_step { act[0] && !down[ldr] -> \
		for (i : 0 .. N - 1) { rpos[i] = cpos[i]; rid[i] = cid[i] }; \
		rmark = mk[0]; rby = ldr; rvalid = 1; rfresh = 1; \
		printf("MSC: leader %d reports against %d\n", ldr, rmark); \
		Check() }

/* Reports expire after 2 x node expiry + 1 heartbeat (time is abstract:
 * expiry may happen at any step). */
#define EXPIRE :: d_step { rfresh -> rfresh = 0; printf("MSC: report expires\n"); Check() }

/* A fault: every acknowledged record has one more fault behind it. */
inline Fault() {
	nf++;
	for (i : 1 .. P) {
		if
		:: AK(i) != 0 && fsa[i] <= FAULTS -> fsa[i]++
		:: else -> skip
		fi
	}
}

/* Replica events hit followers in name order (see Symmetry), never the
 * assigned leader; replica 0 (the first leader) only once deposed. */
#define HITOK(r) (r != ldr && (r <= 1 || (hit & (1 << (r - 1))) != 0))
inline Hit(r) {
	hit = hit | (1 << r)
}

/* Leader death: the control plane marks the leader down (a fault); its
 * process either crashed or keeps running, deposed, taking writes. */
#define LEADER_DOWN \
	:: d_step { nf < MAXF && !down[ldr] -> down[ldr] = 1; Fault(); \
		printf("MSC: leader %d marked down, still running\n", ldr); Check() } \
	:: d_step { nf < MAXF && !down[ldr] -> down[ldr] = 1; dead[ldr] = 1; act[0] = 0; Fault(); \
		printf("MSC: leader %d dies\n", ldr); Check() }

/* [ID-3][ID-4] Start of a replica process: read or rotate the id, ask the
 * control plane for the node's incarnation before any store opens,
 * register, learn the current epoch, then serve. */
#ifdef OLD_EPOCH_ACCEPTED
#define LEARN_EPOCH(r) repoch[r] = 0
#else
#define LEARN_EPOCH(r) repoch[r] = ep
#endif
#ifdef NO_RESTORE_ROTATION
#define ROTATE_IF_BEHIND(r) skip
#else
#define ROTATE_IF_BEHIND(r) \
	if \
	:: behind[r] -> sid[r] = sid[r] + N \
	:: else -> skip \
	fi
#endif
/* rot: the local check (a) of this start asked for a new id. A new id
 * made at (a) is not replaced again at (c): it was never announced. */
inline Startup(r) {
	if
	:: rot -> sid[r] = sid[r] + N; rot = 0
	:: else -> ROTATE_IF_BEHIND(r)
	fi;
	reg[r] = sid[r];     /* register: a new incarnation, written to */
	behind[r] = 0;       /* <data dir>/registration */
	LEARN_EPOCH(r);
	dead[r] = 0;
	down[r] = 0;
	if
	:: act[1] && who[1] == r -> act[1] = 0
	:: else -> skip
	fi
}

/* Wipe (a fault): no storage-id file, so a new id [ID-1]. */
#define WIPE(r) \
	:: d_step { nf < MAXF && HITOK(r) -> \
		Fault(); Hit(r); lg[r] = 0; tl[r] = 0; SYNCED(r); sid[r] = sid[r] + N; Startup(r); \
		printf("MSC: %d wiped, restarts with id %d\n", r, sid[r]); Check() }

/* Clean stop and restart: same id [ID-3]. */
#ifndef CRASHES
#define RESTART(r) \
	:: d_step { nr < MAXR && HITOK(r) -> \
		nr++; Hit(r); Startup(r); \
		printf("MSC: %d restarts cleanly, id %d\n", r, sid[r]); Check() }
#else
/* With crash rules: the graceful stop closes and syncs every store, then
 * writes clean-stop; the machine may lose power while the broker is down
 * (page cache lost, which after the sync holds nothing the disk lacks);
 * the new run may be configured with another fsync mode (nm). Clean stop
 * keeps the id whatever the boot id or syncfs say. */
#ifdef CLEAN_STOP_SKIPS_SYNC
#define STOP_SYNC(r) skip
#define DIRTY_AFTER_STOP(r) DIRTY(r)
#else
#define STOP_SYNC(r) SYNCED(r)
#define DIRTY_AFTER_STOP(r) 0
#endif
#define RESTART_AS(r, pl, nm) \
	:: d_step { nr < MAXR && HITOK(r) && (!pl || !DIRTY_AFTER_STOP(r) || nf < MAXF) -> \
		STOP_SYNC(r); nr++; Hit(r); \
		if \
		:: pl && DIRTY(r) -> Fault(); lg[r] = dk[r]; tl[r] = dt[r] \
		:: else -> skip \
		fi; \
		md[r] = nm; Startup(r); \
		printf("MSC: %d stops cleanly (power cut while down %d), holds %d, restarts with id %d, mode %d\n", r, pl, tl[r], sid[r], nm); \
		ForgetDisk(); \
		Check() }
#define RESTART(r) RESTART_AS(r, 0, 0) RESTART_AS(r, 0, 1) RESTART_AS(r, 1, 0) RESTART_AS(r, 1, 1)

/* [ID-3] The unclean-stop rows of datadir.Decide (decideLocal after the
 * run-state says running; storage-id and registration are intact, a crash
 * does not touch them). Facts: rs, the run-state record decodes; bk, both
 * boot ids (recorded and current) are known; same, they are equal; sok,
 * syncfs at this start succeeded; nm, the new run's configured mode. The
 * recorded mode md[r] is the crashed run's. Order as in the code: mode,
 * boot unknown, boot changed, syncfs failed. Sets rot. */
#ifdef CONFIGURED_MODE_DECIDES
#define CRASHED_MODE(r, nm) nm
#else
#define CRASHED_MODE(r, nm) md[r]
#endif
#ifdef UNCLEAN_KEEPS_ANY_MODE
#define KEEPS_BY_MODE(r, nm) 1
#else
#define KEEPS_BY_MODE(r, nm) (CRASHED_MODE(r, nm) == 0)
#endif
#ifdef UNKNOWN_RUN_STATE_KEEPS_ID
#define RS_UNKNOWN_ROTATES 0
#else
#define RS_UNKNOWN_ROTATES 1
#endif
#ifdef UNKNOWN_BOOT_KEEPS_ID
#define BOOT_UNKNOWN_ROTATES(bk) 0
#define BOOT_SAME(bk, same) (!bk || same)
#else
#define BOOT_UNKNOWN_ROTATES(bk) (!bk)
#define BOOT_SAME(bk, same) same
#endif
#ifdef IGNORE_BOOT_ID
#define BOOT_CHANGED_ROTATES(bk, same) 0
#else
#define BOOT_CHANGED_ROTATES(bk, same) (!BOOT_SAME(bk, same))
#endif
#ifdef IGNORE_SYNCFS_FAILURE
#define SYNCFS_FAILED_ROTATES(sok) 0
#else
#define SYNCFS_FAILED_ROTATES(sok) (!sok)
#endif
inline DecideUnclean(r, rs, bk, same, sok, nm) {
	if
	:: !rs -> rot = RS_UNKNOWN_ROTATES
	:: else ->
		if
		:: KEEPS_BY_MODE(r, nm) -> rot = 0
		:: else ->
			if
			:: BOOT_UNKNOWN_ROTATES(bk) -> rot = 1
			:: else ->
				if
				:: BOOT_CHANGED_ROTATES(bk, same) -> rot = 1
				:: else ->
					if
					:: SYNCFS_FAILED_ROTATES(sok) -> rot = 1
					:: else -> rot = 0
					fi
				fi
			fi
		fi
	fi
}

/* An unclean stop of replica r and its restart, in one step. ph is what
 * happened:
 *   0  the process died, the page cache survived: same boot, and syncfs
 *      at start succeeds and writes the page cache back;
 *   1  the process died and writeback failed (only with dirty pages): the
 *      kernel dropped them, so the replica holds what is on disk; same
 *      boot, syncfs fails;
 *   2  the machine lost power before the page cache reached the disk: the
 *      replica holds what is on disk; the boot id changed; syncfs
 *      succeeds (the lost pages are no longer there to fail);
 *   3  as 2, but writeback had finished before the cut (only with dirty
 *      pages): nothing is lost; the boot id changed.
 * One that loses records is a fault. rs, bk: whether the run-state record
 * decodes and both boot ids are known (else missing or corrupt record,
 * boot=- recorded, or boot_id unreadable now). nm: the new run's mode.
 * Then the rest of the start (Startup). */
#define LOSES(ph) (ph == 1 || ph == 2)
#define PH_0 "MSC: %d stops uncleanly (process died, page cache kept), holds %d; run-state mode %d, readable %d; boot ids known %d: rotate %d\n"
#define PH_1 "MSC: %d stops uncleanly (process died, writeback failed), holds %d; run-state mode %d, readable %d; boot ids known %d: rotate %d\n"
#define PH_2 "MSC: %d stops uncleanly (power cut), holds %d; run-state mode %d, readable %d; boot ids known %d: rotate %d\n"
#define PH_3 "MSC: %d stops uncleanly (power cut after writeback), holds %d; run-state mode %d, readable %d; boot ids known %d: rotate %d\n"
#define CRASH(r, ph, rs, bk, nm) \
	:: d_step { nc < MAXC && HITOK(r) && ((ph != 1 && ph != 3) || DIRTY(r)) && \
		(!LOSES(ph) || !DIRTY(r) || nf < MAXF) -> \
		nc++; Hit(r); \
		if \
		:: LOSES(ph) && DIRTY(r) -> Fault(); lg[r] = dk[r]; tl[r] = dt[r] \
		:: else -> SYNCED(r) \
		fi; \
		DecideUnclean(r, rs, bk, (ph <= 1), (ph != 1), nm); \
		printf(PH_ ## ph, r, tl[r], md[r], rs, bk, rot); \
		md[r] = nm; Startup(r); \
		printf("MSC: %d restarts with id %d, mode %d\n", r, sid[r], nm); \
		ForgetDisk(); \
		Check() }
#define CRASH_FACTS(r, ph) CRASH(r, ph, 1, 1, 0) CRASH(r, ph, 1, 1, 1) \
	CRASH(r, ph, 1, 0, 0) CRASH(r, ph, 1, 0, 1) CRASH(r, ph, 0, 1, 0) CRASH(r, ph, 0, 1, 1)
#define CRASHES_OF(r) CRASH_FACTS(r, 0) CRASH_FACTS(r, 1) CRASH_FACTS(r, 2) CRASH_FACTS(r, 3)
#endif

/* Restore from an old copy (a fault): the directory holds k < tail records
 * and the registration it saw is behind the control plane's. */
#define RESTORE(r, k) \
	:: d_step { nf < MAXF && HITOK(r) && k < tl[r] -> \
		Fault(); Hit(r); lg[r] = lg[r] & ((1 << (2 * k)) - 1); tl[r] = k; behind[r] = 1; \
		SYNCED(r); Startup(r); \
		printf("MSC: %d restored to %d records, restarts with id %d\n", r, k, sid[r]); Check() }

/* Placement [CP-1..3] of n while the leader is down, then the fence at a
 * new epoch with the members in mask. */
#ifdef PLACEMENT_IGNORES_IDS
#define IDOK(n) 1
#else
#define IDOK(n) (rid[n] == reg[n])
#endif
#ifdef HELD_REPORT_ANY_ID
#define HELDIDOK(n) 1
#else
#define HELDIDOK(n) IDOK(n)
#endif
#define FRESH  (rvalid && rfresh && rby == ldr)
/* Held: the report's leader is still the assigned leader, at the
 * incarnation that made the report (the assigned leader never restarts in
 * the model, so that part always holds), and is down: the report's age is
 * measured to its last heartbeat, so it has not expired [CP-2]. */
#define HELD   (rvalid && !rfresh && rby == ldr && down[ldr])
#define ELIGIBLE(n) (rpos[n] >= rmark && ((FRESH && IDOK(n)) || (HELD && HELDIDOK(n))))
#ifdef FENCE_COUNTS_CHANGED_ID
#define FENCEOK(r) 1
#else
#define FENCEOK(r) (sid[r] == rid[r])
#endif

#define PLACE(n, mask) \
	:: d_step { ne < MAXE && down[ldr] && n != ldr && !dead[n] && \
		(mask & (1 << ldr)) == 0 && ELIGIBLE(n) -> \
		ok = 1; \
		for (i : 0 .. N - 1) { \
			if \
			:: (mask & (1 << i)) != 0 && (dead[i] || !FENCEOK(i)) -> ok = 0 \
			:: else -> skip \
			fi \
		}; \
		if \
		:: ok -> Fence(n, mask) \
		:: else -> skip \
		fi }

/* The fence: the new leader n and Q-1 members whose ids are the ids the
 * report counted them under (so a replica whose id changed cannot stand
 * in for the data it lost) move to the new epoch, so a stale leader can no
 * longer gather a quorum; n adopts the most up-to-date log among them
 * (last epoch, then length). */
inline Fence(n, mask) {
	best = n;
	for (i : 0 .. N - 1) {
		if
		:: (mask & (1 << i)) != 0 &&
		   (EP(i, tl[i]) > EP(best, tl[best]) ||
		    (EP(i, tl[i]) == EP(best, tl[best]) && tl[i] > tl[best])) -> best = i
		:: else -> skip
		fi
	};
	lg[n] = lg[best];
	tl[n] = tl[best];
	COMMIT_SYNC(n);
	ep++;
	repoch[n] = ep;
	for (i : 0 .. N - 1) {
		if
		:: (mask & (1 << i)) != 0 -> repoch[i] = ep
		:: else -> skip
		fi
	};
	/* The old leader's process, if it still runs, is deposed but goes on. */
	if
	:: act[0] ->
		act[1] = 1; who[1] = who[0]; lep[1] = lep[0]; mk[1] = mk[0];
		for (i : 0 .. N - 1) {
			cpos[N + i] = cpos[i]; cid[N + i] = cid[i]
		}
	:: else -> act[1] = 0
	fi;
	act[0] = 1; who[0] = n; lep[0] = ep; mk[0] = 0;
	/* Its cursors start at the base, under the ids the followers present
	 * in its first handshakes. */
	for (i : 0 .. N - 1) { cpos[i] = 0; cid[i] = sid[i] };
	ldr = n;
	rfresh = 0;
	ne++;
	printf("MSC: placement: %d leads at epoch %d, fenced with mask %d, holds %d\n", n, ep, mask, tl[n]);
	Check()
}

#if N == 5
#define SLOT(s) WRITE(s) \
	LOOKUP(s, 0) LOOKUP(s, 1) LOOKUP(s, 2) LOOKUP(s, 3) LOOKUP(s, 4) \
	PASS(s, 1) PASS(s, 2) PASS(s, 3) PASS(s, 4) PASS(s, 5) PASS(s, 6) PASS(s, 7) PASS(s, 8) PASS(s, 9) PASS(s, 10) PASS(s, 11) PASS(s, 12) PASS(s, 13) PASS(s, 14) PASS(s, 15) PASS(s, 16) PASS(s, 17) PASS(s, 18) PASS(s, 19) PASS(s, 20) PASS(s, 21) PASS(s, 22) PASS(s, 23) PASS(s, 24) PASS(s, 25) PASS(s, 26) PASS(s, 27) PASS(s, 28) PASS(s, 29) PASS(s, 30) PASS(s, 31)
#else
#define SLOT(s) WRITE(s) \
	LOOKUP(s, 0) LOOKUP(s, 1) LOOKUP(s, 2) \
	PASS(s, 1) PASS(s, 2) PASS(s, 3) PASS(s, 4) PASS(s, 5) PASS(s, 6) PASS(s, 7)
#endif
#if defined(CRASHES) && defined(CRASHES_ONLY)
#define REPLICA(r) RESTART(r) CRASHES_OF(r)
#elif defined(CRASHES)
#define REPLICA(r) WIPE(r) RESTART(r) RESTORE(r, 0) RESTORE(r, 1) RS2(r) CRASHES_OF(r)
#else
#define REPLICA(r) WIPE(r) RESTART(r) RESTORE(r, 0) RESTORE(r, 1) RS2(r)
#endif
#if P > 2
#define RS2(r) RESTORE(r, 2)
#else
#define RS2(r)
#endif

init {
#ifdef CRASHES
	/* Every replica starts in the cluster's mode (followers start alike):
	 * START_MODE, or either. */
#ifdef START_MODE
	md[0] = START_MODE;
#else
	if
	:: md[0] = 0
	:: md[0] = 1
	fi;
#endif
#endif
	d_step {
		for (i : 0 .. N - 1) {
			sid[i] = i + 1;
			reg[i] = i + 1;
			repoch[i] = 1;
#ifdef CRASHES
			md[i] = md[0];
#endif
			cid[i] = i + 1   /* the first leader learned every id */
		};
		ldr = 0;
		act[0] = 1;
		who[0] = 0;
		lep[0] = 1
	};
end:
	do
	SLOT(0)
	SLOT(1)
	REPORT
	EXPIRE
	LEADER_DOWN
	REPLICA(0) REPLICA(1) REPLICA(2)
#if N == 5
	REPLICA(3) REPLICA(4)
	PLACE(0, 6) PLACE(0, 10) PLACE(0, 18) PLACE(0, 12) PLACE(0, 20) PLACE(0, 24)
	PLACE(1, 5) PLACE(1, 9) PLACE(1, 17) PLACE(1, 12) PLACE(1, 20) PLACE(1, 24)
	PLACE(2, 3) PLACE(2, 9) PLACE(2, 17) PLACE(2, 10) PLACE(2, 18) PLACE(2, 24)
	PLACE(3, 3) PLACE(3, 5) PLACE(3, 17) PLACE(3, 6) PLACE(3, 18) PLACE(3, 20)
	PLACE(4, 3) PLACE(4, 5) PLACE(4, 9) PLACE(4, 6) PLACE(4, 10) PLACE(4, 12)
#else
	PLACE(0, 2) PLACE(0, 4)
	PLACE(1, 1) PLACE(1, 4)
	PLACE(2, 1) PLACE(2, 2)
#endif
	od
}
