/*
 * FelixHeadTrim: the conditional head trim (seed 004, "The trim that hid
 * the fence"), checked by SPIN.
 *
 * Three brokers with Raft-shaped leadership (one assigned leader, failover
 * that keeps the committed prefix and writes a fence record, a deposed
 * leader that keeps taking writes, followers that learn the commit one
 * shipment late), two felixd lease holders (epochs 1 and 2),
 * tail-conditional writes and trims carrying the holder's epoch, segment
 * deletion below the floor, the loss and rebuild of the trim index, a
 * follower behind the leader's first surviving position that resets its
 * log there (ResetAt), and broker crashes (the in-memory commit mark and
 * leadership are lost; the floor is rebuilt from what is stored).
 *
 * The model is one process whose do-loop picks one enabled action per step
 * (TLA's Next). Every action is a d_step, so a step is atomic and the
 * invariants are evaluated at the end of every step (inline Check).
 *
 * Invariants (each assert names it, so pan and `spin -t` print the name):
 *   StaleTrimRefused  no committed write or trim from one holder follows a
 *                     committed write from a newer holder.
 *   FloorRecordKept   the serving leader's floor, once it serves, is the one
 *                     its committed trim records set, deleted ones included.
 *   NoReadBelowTrim   no reader of the serving leader is served a data
 *                     record below the floor of an acknowledged trim (nor
 *                     of a trim the leader knows committed).
 *   FloorNeverBack    a broker's floor never moves back when its storage
 *                     is reset (ResetAt) or reopened after a crash [TR-5].
 *
 * Switches: each -D macro removes one rule; the twin with it must fail.
 *   -DUNTAGGED           [TR-4] CursorTooOld carries no trim headers.
 *   -DHIDDEN_TRIMS       [TR-2][TR-5] a trim record keeps no caller headers,
 *                        so nothing below the tail carries the new epoch:
 *                        the design as first modelled (readers skip trims,
 *                        the refusal has nothing to carry).
 *   -DNOOP_SKIPS_CHECK   [TR-3] a no-op trim skips the tail check and
 *                        answers with the current tail.
 *   -DRETENTION_ON       [TR-7] retention deletes old segments regardless of
 *                        the floor (never the active one).
 *   -DREAD_FROM_EARLIEST [FD-1] felixd re-reads from earliest, not its cursor.
 *   -DTAIL_FROM_REFUSAL  [FD-2] felixd adopts the tail an OffsetMismatch names.
 *   -DDELETE_AT_FLOOR    [TR-6] deletion also removes the segment holding the
 *                        floor (active one included).
 *   -DSTART_FROM_SEGMENTS [TR-4] the readable start is the first surviving
 *                        segment, not the floor (deletion lags the floor).
 *   -DACK_LEADER_TRIM    [TR-2] under ack Leader a trim is acknowledged once
 *                        the leader persisted it, before it commits.
 *   -DSERVE_BEFORE_FENCE [TR-4] a new leader serves reads once its fence is
 *                        written, before it commits.
 *   -DRESET_DROPS_FLOOR  [TR-5] ResetAt puts the floor back at the base and
 *                        keeps no floor apart from the trim index.
 *
 * Bounds (override with -D): MAXW data writes, MAXT trims (no-ops that
 * answer included), MAXE failovers (each writes a fence record), MAXC
 * broker crashes. The log has MAXW+MAXT+MAXE positions.
 * -DNO_INDEX_LOSS turns off the loss and rebuild of the trim index (a
 * bound on faults, not a rule; see RetentionOn in README.md). The
 * configurations of hack/check-models.sh set smaller bounds than these
 * defaults (see formal/README.md).
 *
 * Holders write, trim and read only at a broker that serves (its fence
 * committed, or a deposed leader that still believes it leads). A proposal
 * a new leader takes before its fence commits is checked against the same
 * tail and acknowledged only after the commit, so it is modelled as made
 * right after the commit.
 *
 * Run: hack/check-models.sh (see formal/README.md).
 */

#ifndef MAXW
#define MAXW 2
#endif
#ifndef MAXT
#define MAXT 3
#endif
#ifndef MAXE
#define MAXE 1
#endif
#ifndef MAXC
#define MAXC 0
#endif

#define NB 3                   /* brokers 0..2 */
#define L  (MAXW + MAXT + MAXE) /* log positions 1..L (model numbers from 1) */
#define LP (L + 1)

#define NONE 0
#define W    1                 /* data record */
#define T    2                 /* trim record */
#define F    3                 /* fence record: the first of a leader's epoch */
#define HW(b, p) (K(b, p) == W || K(b, p) == T)  /* written by a holder */

/* One record packs into a byte: kind (2 bits), the holder (epoch) that
 * wrote it (2 bits, a ghost for data records: a data record's own epoch
 * header), and the floor a trim asks for (4 bits). */
typedef BLog {
	byte e[LP];
};
#define K(b, p)   (lg[b].e[p] & 3)
#define WHO(b, p) ((lg[b].e[p] >> 2) & 3)
#define FLR(b, p) (lg[b].e[p] >> 4)
#define REC(k, w, f) ((k) | ((w) << 2) | ((f) << 4))

BLog lg[NB];        /* each broker's log; positions below del[] are deleted
                     * but their content is kept as a ghost for the checks */
byte tl[NB];        /* the tail: last position in the log */
byte cm[NB];        /* commit index known by the broker */
byte del[NB];       /* first surviving position (segments below deleted) */
byte fl[NB];        /* the floor the broker's storage applies [TR-5] */
bool isL[NB];       /* believes it leads (a deposed leader still does) */
bool srv[NB];       /* serves reads: its fence is committed [TR-4] */
byte kf[NB];        /* the floor ResetAt kept apart from the index [TR-5] */
byte ldr;           /* the assigned (serving) leader */
byte akf = 1;       /* ghost: highest floor of any acknowledged trim */
#if MAXC > 0
byte gc;            /* ghost: the highest commit mark any leader reached */
#define GCUPDATE gc = cm[c]
#define GCSET
#else
hidden byte gc;     /* without crashes no commit mark falls: the highest one */
#define GCUPDATE skip
#define GCSET gc = (cm[0] > cm[1] -> cm[0] : cm[1]); gc = (cm[2] > gc -> cm[2] : gc)
#endif

byte lease = 1;     /* epoch of the current lease holder (1, then 2) */
byte exp[3];        /* holder h: last position it knows (next write exp+1) */
byte pend[3];       /* holder h: position of its unanswered append, 0 none */
bool retired[3];    /* holder h stopped: it saw a newer epoch */

byte nw, nt, ne, nc; /* bounds: writes, trims, failovers, crashes made */

/* Temporaries of the d_steps, not part of the state. */
hidden byte i, j, x, y, rs, tag, from, pfl, af;
hidden byte newer;

/* Invariant values, recomputed by Check() after every step. */
hidden byte StaleTrimRefused = 1;
hidden byte FloorRecordKept = 1;
hidden byte NoReadBelowTrim = 1;
hidden byte FloorNeverBack = 1;

/* The epoch a stored trim record carries in its headers [TR-2]. */
#ifdef HIDDEN_TRIMS
#define TRIMEPOCH(b, p) 0
#else
#define TRIMEPOCH(b, p) WHO(b, p)
#endif

/* rs = the readable start of broker b [TR-4]: reads below it are refused
 * with CursorTooOld; reading from earliest resolves to it. */
inline ReadableStart(b) {
#ifdef START_FROM_SEGMENTS
	rs = del[b]
#else
	rs = (fl[b] > del[b] -> fl[b] : del[b])
#endif
}

/* tag = the epoch in the headers of the trim that set b's floor, as
 * CursorTooOld carries it [TR-4]; 0 when absent (no trim, or deleted). */
inline FloorTag(b) {
	tag = 0;
#ifndef UNTAGGED
	for (j : 1 .. L) {
		if
		:: j <= cm[b] && j >= del[b] && K(b, j) == T && FLR(b, j) == fl[b] ->
			tag = TRIMEPOCH(b, j)
		:: else -> skip
		fi
	}
#endif
}

/* pfl = the floor b's storage would compare a new trim against: the
 * highest floor of any trim in its log, committed or not. */
inline PendingFloor(b) {
	pfl = fl[b];
	for (j : 1 .. L) {
		if
		:: j <= tl[b] && K(b, j) == T && FLR(b, j) > pfl -> pfl = FLR(b, j)
		:: else -> skip
		fi
	}
}

/* Apply newly committed trims on b: the floor only rises [TR-5]. */
inline ApplyFloor(b, lo, hi) {
	for (j : 1 .. L) {
		if
		:: j > lo && j <= hi && K(b, j) == T && FLR(b, j) > fl[b] -> fl[b] = FLR(b, j)
		:: else -> skip
		fi
	}
}

/* Replicate leader c's whole log onto follower v and commit it on c (a
 * majority of three is two), which commits c's fence too: c serves from
 * now on [TR-4]. The shipment carries c's commit from before it, so v
 * learns the new commit only with the next one. Committed trims move the
 * floor on both. */
inline ShipAndCommit(c, v) {
	for (j : 1 .. L) {
		lg[v].e[j] = lg[c].e[j]
	}
	tl[v] = tl[c];
	isL[v] = false;
	srv[v] = false;
	x = cm[c];
	y = cm[v];
	if
	:: cm[c] > cm[v] -> cm[v] = cm[c]
	:: else -> skip
	fi;
	cm[c] = tl[c];
	GCUPDATE;
	srv[c] = true;
	ApplyFloor(c, x, cm[c]);
	ApplyFloor(v, y, cm[v])
}

inline Check() {
	/* StaleTrimRefused over the committed log of the serving leader. */
	x = 0;
	for (i : 1 .. L) {
		if
		:: i <= cm[ldr] && HW(ldr, i) && WHO(ldr, i) < x ->
			StaleTrimRefused = false
		:: else -> skip
		fi;
		if
		:: i <= cm[ldr] && K(ldr, i) == W && WHO(ldr, i) > x -> x = WHO(ldr, i)
		:: else -> skip
		fi
	}
	/* af = the floor the committed trims set, deleted ones included. */
	af = 1;
	for (i : 1 .. L) {
		if
		:: i <= cm[ldr] && K(ldr, i) == T && FLR(ldr, i) > af -> af = FLR(ldr, i)
		:: else -> skip
		fi
	}
	/* Checked once the leader serves: before its fence commits, its floor
	 * lags by design (it is what it knew as a follower; a reset follower
	 * also holds, as ghosts copied below its first position, trims it never
	 * stored) [TR-4]. */
	FloorRecordKept = (!srv[ldr] || fl[ldr] == af);
	/* A reader of the serving leader may be served any surviving committed
	 * data record at or above the readable start, once it serves. */
	if
	:: akf > af -> af = akf
	:: else -> skip
	fi;
	ReadableStart(ldr);
	for (i : 1 .. L) {
		if
		:: srv[ldr] && i >= rs && i < af && i <= cm[ldr] && K(ldr, i) == W ->
			NoReadBelowTrim = false
		:: else -> skip
		fi
	}
	assert(StaleTrimRefused);
	assert(FloorRecordKept);
	assert(NoReadBelowTrim);
	assert(FloorNeverBack)
}

#define ACTIVE(h) (!retired[h] && (h == 1 || lease == 2) && pend[h] == 0)

/* [FD-1] Holder h reads at broker s from its own cursor (exp+1), skipping
 * trim records. It stops on a newer epoch in a record or in the tag of a
 * CursorTooOld refusal; otherwise the tail it read becomes its own. */
inline Read(h, s) {
	ReadableStart(s);
#ifdef READ_FROM_EARLIEST
	from = rs;     /* earliest resolves to the floor: never refused */
#else
	from = exp[h] + 1;
#endif
	FloorTag(s);
	newer = false;
	for (j : 1 .. L) {
		if
		:: j >= from && j >= rs && j <= cm[s] && K(s, j) == W && WHO(s, j) > h ->
			newer = true
		:: else -> skip
		fi
	}
	if
	:: (from < rs && tag > h) || newer ->
		retired[h] = true;
		printf("MSC: holder %d reads at broker %d from %d (start %d, tag %d): newer epoch, stops\n", h, s, from, rs, tag)
	:: else ->
		exp[h] = cm[s];
		printf("MSC: holder %d reads at broker %d from %d (start %d, tag %d): tail %d\n", h, s, from, rs, tag, cm[s])
	fi
}

/* A write refused with OffsetMismatch names the current tail [TR-1]. */
inline Refused(h, s) {
#ifdef TAIL_FROM_REFUSAL
	exp[h] = tl[s];   /* [FD-2] broken: the tail taken from a refusal */
#endif
	/* [FD-2] otherwise the holder must read to learn the tail */
	printf("MSC: holder %d refused at broker %d: OffsetMismatch, tail %d\n", h, s, tl[s])
}

/* [TR-1] Holder h appends a data record at s, expecting tail exp[h]. */
inline Write(h, s) {
	if
	:: tl[s] == exp[h] ->
		tl[s]++;
		lg[s].e[tl[s]] = REC(W, h, 0);
		pend[h] = tl[s];
		nw++;
		printf("MSC: holder %d writes at broker %d position %d\n", h, s, tl[s])
	:: else -> Refused(h, s)
	fi
}

/* [TR-2][TR-3] Holder h trims at s asking for floor ff (<= its own
 * position). A trim at or below the current floor writes nothing but still
 * checks the tail. */
inline Trim(h, s, ff) {
	PendingFloor(s);
	if
	:: ff <= pfl ->                        /* no-op trim */
#ifdef NOOP_SKIPS_CHECK
		exp[h] = tl[s];                   /* [TR-3] broken: answers the tail unchecked */
		nt++;
		printf("MSC: holder %d no-op trim at broker %d, unchecked, learns tail %d\n", h, s, tl[s])
#else
		if
		:: tl[s] == exp[h] -> nt++;       /* [TR-3] checked: the answer is exp[h] */
			printf("MSC: holder %d no-op trim at broker %d, tail checked\n", h, s)
		:: else -> Refused(h, s)
		fi
#endif
	:: else ->
		if
		:: tl[s] == exp[h] ->
			tl[s]++;
			lg[s].e[tl[s]] = REC(T, h, ff);
			pend[h] = tl[s];
			nt++;
#ifdef ACK_LEADER_TRIM
			/* [TR-2] broken: acknowledged once the leader persisted it */
			if
			:: s == ldr && srv[s] && ff > akf -> akf = ff
			:: else -> skip
			fi;
#endif
			printf("MSC: holder %d trims at broker %d position %d, floor %d\n", h, s, tl[s], ff)
		:: else -> Refused(h, s)
		fi
	fi
}

#define CANWRITE(h, s) (ACTIVE(h) && isL[s] && srv[s] && nw < MAXW && (tl[s] < L || tl[s] != exp[h]))
#define CANTRIM(h, s, ff) (ACTIVE(h) && isL[s] && srv[s] && nt < MAXT && ff <= tl[s] + 1 && (tl[s] < L || tl[s] != exp[h]))

#define HOLDER(h, s) \
	:: d_step { ACTIVE(h) && isL[s] && srv[s] -> Read(h, s); Check() } \
	:: d_step { CANWRITE(h, s) -> Write(h, s); Check() } \
	:: d_step { CANTRIM(h, s, 1) -> Trim(h, s, 1); Check() } \
	:: d_step { CANTRIM(h, s, 2) -> Trim(h, s, 2); Check() } \
	:: d_step { CANTRIM(h, s, 3) -> Trim(h, s, 3); Check() } \
	:: d_step { CANTRIM(h, s, 4) -> Trim(h, s, 4); Check() } \
	:: d_step { CANTRIM(h, s, 5) -> Trim(h, s, 5); Check() } \
	:: d_step { CANTRIM(h, s, 6) -> Trim(h, s, 6); Check() } \
	:: d_step { CANTRIM(h, s, 7) && 7 <= L -> Trim(h, s, 7); Check() }

/* The leader ships to follower v and commits what it has. */
#define SHIP(v) \
	:: d_step { v != ldr && isL[ldr] && tl[v] + 1 >= del[ldr] && \
		(tl[v] != tl[ldr] || cm[ldr] != tl[ldr] || cm[v] != cm[ldr] || isL[v] || !srv[ldr]) -> \
		ShipAndCommit(ldr, v); printf("MSC: leader %d ships to %d, commits %d\n", ldr, v, cm[ldr]); Check() }

/* Failover to c: c must hold the committed prefix (Raft's election
 * restriction); a crashed leader may be promoted again. c writes its fence
 * record at its tail and serves only once it has committed it (the next
 * shipment) [TR-4]: until then its commit mark, hence its floor, is what it
 * knew as a follower. The old leader is deposed but still believes it leads
 * until someone ships to it. */
#ifdef SERVE_BEFORE_FENCE
#define FENCESRV true      /* [TR-4] broken: serves once the fence is written */
#else
#define FENCESRV false
#endif
#define ELECT(c) \
	:: d_step { ne < MAXE && (c != ldr || !isL[c]) && tl[c] < L -> \
		GCSET; \
		newer = tl[c] < gc; \
		for (i : 1 .. L) { \
			if \
			:: i <= gc && lg[c].e[i] != lg[ldr].e[i] -> newer = true \
			:: else -> skip \
			fi \
		}; \
		if \
		:: !newer -> ne++; isL[c] = true; ldr = c; \
			tl[c]++; lg[c].e[tl[c]] = REC(F, 0, 0); srv[c] = FENCESRV; \
			printf("MSC: failover: broker %d leads, fence at %d, commit known %d\n", c, tl[c], cm[c]); Check() \
		:: else -> skip \
		fi }

/* [TR-5] Follower v's log ends below the leader's first surviving
 * position, so the leader cannot ship to it: v resets its log there
 * (ResetAt): empty at del[ldr], commit mark raised to below it (the leader
 * vouches it is committed), its own records above its commit mark gone
 * (they are absent from, or divergent with, the leader's log). The floor
 * and the trim that set it are kept apart from the records [TR-5]; the
 * broken variant puts the floor back at the base. */
#define RESET(v) \
	:: d_step { v != ldr && isL[ldr] && tl[v] + 1 < del[ldr] -> \
		for (j : 1 .. L) { \
			if \
			:: j > cm[v] -> lg[v].e[j] = 0 \
			:: else -> skip \
			fi \
		}; \
		tl[v] = del[ldr] - 1; del[v] = del[ldr]; cm[v] = tl[v]; \
		isL[v] = false; srv[v] = false; \
		RESETFLOOR(v); \
		printf("MSC: broker %d resets its log at %d, floor %d\n", v, del[v], fl[v]); Check() }
#ifdef RESET_DROPS_FLOOR
#define RESETFLOOR(v) FloorNeverBack = FloorNeverBack && fl[v] == 1; fl[v] = 1; kf[v] = 0
#else
#define RESETFLOOR(v) kf[v] = fl[v]
#endif

/* A process crash of broker b: it stops leading and serving, and its
 * commit mark falls back to the one it persisted, which it synced whenever
 * the floor moved (so at or above the floor-setting trim) and at a reset.
 * On restart the floor is derived from the committed trims it stores and
 * the floor a reset kept [TR-5]. */
#if MAXC > 0
#define CRASH(b) \
	:: d_step { nc < MAXC -> nc++; \
		x = 0; \
		for (i : 1 .. L) { \
			if \
			:: i <= cm[b] && i + 1 >= del[b] && (i + 1 == del[b] || (K(b, i) == T && FLR(b, i) == fl[b])) -> x = i \
			:: else -> skip \
			fi \
		}; \
		cm[b] = x; \
		y = (kf[b] > 1 -> kf[b] : 1); \
		for (i : 1 .. L) { \
			if \
			:: i >= del[b] && i <= cm[b] && K(b, i) == T && FLR(b, i) > y -> y = FLR(b, i) \
			:: else -> skip \
			fi \
		}; \
		FloorNeverBack = FloorNeverBack && y >= fl[b]; \
		fl[b] = y; isL[b] = false; srv[b] = false; \
		printf("MSC: broker %d crashes and restarts: commit %d, floor %d\n", b, cm[b], fl[b]); Check() }
#else
#define CRASH(b)
#endif

/* [TR-6] Broker b deletes whole segments (one record each) below its
 * floor; the record that set the floor is at or above it, so it survives. */
#ifdef DELETE_AT_FLOOR
#define DELETE(b) :: d_step { del[b] <= fl[b] && fl[b] <= tl[b] -> del[b] = fl[b] + 1; \
	printf("MSC: broker %d deletes below %d\n", b, del[b]); Check() }
#else
#define DELETE(b) :: d_step { del[b] < fl[b] -> del[b] = fl[b]; \
	printf("MSC: broker %d deletes below %d\n", b, del[b]); Check() }
#endif

/* [TR-5] b loses its trim index and rebuilds it by a scan of the
 * surviving committed records. -DNO_INDEX_LOSS turns this fault off (a
 * bound, not a rule: see RetentionOn in README.md). */
#ifdef NO_INDEX_LOSS
#define REBUILD(b)
#else
#define REBUILD(b) \
	:: d_step { true -> \
		x = (kf[b] > 1 -> kf[b] : 1); \
		for (i : 1 .. L) { \
			if \
			:: i >= del[b] && i <= cm[b] && K(b, i) == T && FLR(b, i) > x -> x = FLR(b, i) \
			:: else -> skip \
			fi \
		}; \
		if \
		:: x != fl[b] -> fl[b] = x; printf("MSC: broker %d rebuilds its trim index: floor %d\n", b, x); Check() \
		:: else -> skip \
		fi }

#endif

#ifdef RETENTION_ON
/* [TR-7] broken: age retention deletes the oldest committed segment,
 * never the active one, whatever the floor. */
#define RETAIN(b) :: d_step { del[b] < tl[b] && del[b] <= cm[b] -> del[b]++; \
	printf("MSC: retention at broker %d deletes below %d\n", b, del[b]); Check() }
#else
#define RETAIN(b)
#endif

#define ANSWER(h) \
	:: d_step { pend[h] > 0 && pend[h] <= cm[ldr] && HW(ldr, pend[h]) && WHO(ldr, pend[h]) == h -> \
		exp[h] = pend[h]; \
		if \
		:: K(ldr, pend[h]) == T && FLR(ldr, pend[h]) > akf -> akf = FLR(ldr, pend[h]) \
		:: else -> skip \
		fi; \
		pend[h] = 0; \
		printf("MSC: holder %d acknowledged at %d\n", h, exp[h]); Check() } \
	:: d_step { pend[h] > 0 -> pend[h] = 0; printf("MSC: holder %d times out\n", h); Check() }

init {
	d_step {
		for (i : 0 .. NB - 1) {
			del[i] = 1;
			fl[i] = 1
		};
		ldr = 0;
		isL[0] = true;
		srv[0] = true
	};
	do
	:: d_step { lease == 1 -> lease = 2; printf("MSC: lease moves to holder 2\n"); Check() }   /* holder 1 is not told */
	HOLDER(1, 0)
	HOLDER(1, 1)
	HOLDER(1, 2)
	HOLDER(2, 0)
	HOLDER(2, 1)
	HOLDER(2, 2)
	ANSWER(1)
	ANSWER(2)
	SHIP(0)
	SHIP(1)
	SHIP(2)
	ELECT(0)
	ELECT(1)
	ELECT(2)
	RESET(0)
	RESET(1)
	RESET(2)
	CRASH(0)
	CRASH(1)
	CRASH(2)
	DELETE(0)
	DELETE(1)
	DELETE(2)
	REBUILD(0)
	REBUILD(1)
	REBUILD(2)
	RETAIN(0)
	RETAIN(1)
	RETAIN(2)
	od
}
