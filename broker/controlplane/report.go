package controlplane

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// DefaultReportRefresh is how often an unchanged report is rewritten. Its
// life does not depend on it: the leader's "current" Lease renewals vouch
// for unchanged reports (docs/operator.md, "Report write rate") [CP-2];
// the refresh keeps positions visible. A renewal never moves when the
// report was taken (the write's time): a follower registered without a
// storage id after the last write counts only once the report is written
// again [CP-1]. A refresh writes only a view Set since the last write, so
// a leader whose view stopped moving never re-writes it with a fresh
// write time.
const DefaultReportRefresh = 5 * time.Minute

// ReportOptions bound a ReportWriter's write rate.
type ReportOptions struct {
	// Refresh is how often an unchanged report is rewritten
	// (DefaultReportRefresh when zero). Each shard is rewritten once per
	// Refresh at its own phase, so refreshes spread evenly.
	Refresh time.Duration
	// MaxWritesPerSecond caps all of this writer's report writes (10 when
	// zero); changes go before refreshes, oldest first.
	MaxWritesPerSecond float64
	// Groups, when set, is asked at each write for the consumer groups of
	// the shard (by FelixShard name), which ride along like positions: a
	// change of group positions never causes a write, each write carries
	// those of its time (withGroups picks the ones listed). It runs on the
	// writer's goroutine, holding up every other shard's write, so it must
	// answer promptly and never wait for the shard's replication. An error
	// writes the report with the groups it was Set with.
	Groups func(shard string) ([]GroupPosition, error)
}

// ReportWriter writes the status.report of the shards this broker leads,
// with server-side apply as FieldManager [RP-6]. It writes a report when
// what placement reads changes (leader, incarnation, storage ids, epoch,
// which followers are caught up) and otherwise only at the refresh
// interval; positions and consumer groups ride along. A change of caught-up flags alone is
// written once it has held for half a heartbeat interval: under load a
// follower answers a little behind the committed position at one pass and
// level with it at the next, and writing every such flip would cost up to
// the write cap in every busy leader. Every change is still written within
// a heartbeat of being Set, as Current promises. A view is written at most
// once: the time of its write is what the operator takes as when the
// report was taken [CP-1], so a view that stopped moving is never given a
// later one. Safe for concurrent use.
type ReportWriter struct {
	c       *Client
	opts    ReportOptions
	limiter *rate.Limiter
	wake    chan struct{}
	writes  atomic.Uint64
	failed  atomic.Uint64

	mu     sync.Mutex
	shards map[string]*reportState
}

type reportState struct {
	want       felixv1.ShardReport
	written    *felixv1.ShardReport
	writtenAt  time.Time
	dirtySince time.Time // zero: what placement reads is written
	// flipsOnly: every change since dirtySince differs from the written
	// report in caught-up flags alone (written once it has held for the
	// writer's hold).
	flipsOnly bool
	// sets counts Set calls; writtenSets is sets when want was last
	// written. Nothing is written while they are equal: a view written
	// once is never written again with a later write time [CP-1].
	sets, writtenSets uint64
}

// NewReportWriter returns a writer; call Run.
func (c *Client) NewReportWriter(opts ReportOptions) *ReportWriter {
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultReportRefresh
	}
	if opts.MaxWritesPerSecond <= 0 {
		opts.MaxWritesPerSecond = 10
	}
	return &ReportWriter{
		c: c, opts: opts,
		limiter: rate.NewLimiter(rate.Limit(opts.MaxWritesPerSecond), max(1, int(opts.MaxWritesPerSecond))),
		wake:    make(chan struct{}, 1),
		shards:  map[string]*reportState{},
	}
}

// Set records the leader's current view of a shard it leads. Call it
// whenever the view changes; the writer decides whether it is written now
// (a change placement reads) or at the next refresh (positions only).
// rep.ViewAt is the caller's time of the view (the start of the pass it
// describes) and is written as given, never stamped here: Set comes after
// the pass, so its time would bound the view only from above [CP-1]. A
// view Set without ViewAt is written without it.
func (w *ReportWriter) Set(shard string, rep felixv1.ShardReport) {
	now := w.c.cfg.Clock.Now()
	w.mu.Lock()
	st, ok := w.shards[shard]
	if !ok {
		st = &reportState{}
		w.shards[shard] = st
	}
	st.want = *rep.DeepCopy()
	st.sets++
	switch {
	case st.written != nil && samePlacement(*st.written, rep):
		st.dirtySince, st.flipsOnly = time.Time{}, false
	case st.dirtySince.IsZero():
		st.dirtySince, st.flipsOnly = now, st.written != nil && sameBesidesCaughtUp(*st.written, rep)
	default:
		st.flipsOnly = st.flipsOnly && sameBesidesCaughtUp(*st.written, rep)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Invalidate forces the next pass to rewrite shard's report, for a leader
// that sees a stored report that is not its own (another broker wrote it).
// What is written is the next view Set, never the one written already
// [CP-1].
func (w *ReportWriter) Invalidate(shard string) {
	w.mu.Lock()
	if st, ok := w.shards[shard]; ok {
		st.written, st.flipsOnly = nil, false
		if st.dirtySince.IsZero() {
			st.dirtySince = w.c.cfg.Clock.Now()
		}
	}
	w.mu.Unlock()
}

// Drop forgets a shard this broker no longer leads.
func (w *ReportWriter) Drop(shard string) {
	w.mu.Lock()
	delete(w.shards, shard)
	w.mu.Unlock()
}

// Current reports whether every change placement reads was written within
// one heartbeat interval of being Set. RunHeartbeat records it on the
// Lease; the operator keeps unchanged reports alive only while it is true
// [CP-2]. It vouches that the stored report was this leader's view at
// some moment of the last heartbeat interval, not at the renewal, so the
// operator never takes a renewal as the time the view was taken [CP-1].
func (w *ReportWriter) Current() bool {
	now := w.c.cfg.Clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, st := range w.shards {
		if !st.dirtySince.IsZero() && now.Sub(st.dirtySince) > w.c.cfg.HeartbeatInterval {
			return false
		}
	}
	return true
}

// Writes returns the number of successful report writes.
func (w *ReportWriter) Writes() uint64 { return w.writes.Load() }

// Failures returns the number of failed report writes.
func (w *ReportWriter) Failures() uint64 { return w.failed.Load() }

// Run writes reports until ctx ends: changes as soon as the rate cap
// allows, refreshes at each shard's phase. It wakes on Set and at least
// every quarter heartbeat.
func (w *ReportWriter) Run(ctx context.Context) error {
	tick := w.c.cfg.Clock.NewTicker(max(w.c.cfg.HeartbeatInterval/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		for _, shard := range w.due() {
			if err := w.limiter.Wait(ctx); err != nil {
				return ctx.Err()
			}
			w.write(ctx, shard)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
		case <-tick.C():
		}
	}
}

// due lists the shards to write now: changed ones oldest first, then
// those whose refresh phase has come.
func (w *ReportWriter) due() []string {
	now := w.c.cfg.Clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	type item struct {
		name string
		at   time.Time
	}
	var changed, refresh []item
	hold := w.c.cfg.HeartbeatInterval / 2
	for name, st := range w.shards {
		switch {
		case st.sets == st.writtenSets:
			// [CP-1] This view is written already (or never Set, after
			// Invalidate): re-writing it would give a view of the past a
			// fresh write time, which the operator takes as when the
			// report was taken. A leader whose shard loop stalls leaves
			// its last write's time alone; the next Set is written.
		case !st.dirtySince.IsZero() && st.flipsOnly && now.Sub(st.dirtySince) < hold:
			// A caught-up flip that may yet flip back.
		case !st.dirtySince.IsZero():
			changed = append(changed, item{name, st.dirtySince})
		case !now.Before(nextRefresh(name, st.writtenAt, w.opts.Refresh)):
			refresh = append(refresh, item{name, st.writtenAt})
		}
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i].at.Before(changed[j].at) })
	sort.Slice(refresh, func(i, j int) bool { return refresh[i].at.Before(refresh[j].at) })
	out := make([]string, 0, len(changed)+len(refresh))
	for _, it := range append(changed, refresh...) {
		out = append(out, it.name)
	}
	return out
}

// nextRefresh is the first time after writtenAt at the shard's phase: a
// point of the grid phase + k x refresh, the phase fixed by the shard's
// name. Every shard is rewritten once per refresh, spread evenly.
func nextRefresh(shard string, writtenAt time.Time, refresh time.Duration) time.Time {
	h := fnv.New64a()
	_, _ = h.Write([]byte(shard))
	phase := time.Duration(h.Sum64() % uint64(refresh))
	since := writtenAt.UnixNano() - int64(phase)
	k := since/int64(refresh) + 1
	return time.Unix(0, k*int64(refresh)+int64(phase))
}

// write applies one shard's report.
func (w *ReportWriter) write(ctx context.Context, shard string) {
	now := w.c.cfg.Clock.Now()
	w.mu.Lock()
	st, ok := w.shards[shard]
	if !ok {
		w.mu.Unlock()
		return
	}
	rep := writtenReport(st.want, now)
	sets := st.sets
	w.mu.Unlock()
	if w.opts.Groups != nil {
		if ps, err := w.opts.Groups(shard); err != nil {
			w.c.cfg.Log.V(1).Info("report written without fresh group positions", "shard", shard, "error", err.Error())
		} else {
			rep = withGroups(rep, ps)
		}
	}

	body := map[string]any{
		"apiVersion": felixv1.GroupVersion.String(),
		"kind":       "FelixShard",
		"metadata":   map[string]any{"name": shard, "namespace": w.c.cfg.Namespace},
		"status":     map[string]any{"report": rep},
	}
	data, err := json.Marshal(body)
	if err == nil {
		target := &felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Name: shard, Namespace: w.c.cfg.Namespace}}
		err = w.c.c.Status().Patch(ctx, target, client.RawPatch(types.ApplyPatchType, data), client.FieldOwner(FieldManager), client.ForceOwnership)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed.Add(1)
		w.c.cfg.Log.Info("report write failed", "shard", shard, "error", err.Error())
		return
	}
	w.writes.Add(1)
	st, ok = w.shards[shard]
	if !ok {
		return
	}
	st.written, st.writtenAt = &rep, now
	st.writtenSets = sets
	if samePlacement(rep, st.want) {
		st.dirtySince, st.flipsOnly = time.Time{}, false
	}
}

// writtenReport is the report a write at now stores for the view want:
// TakenAt is the write's time, ViewAt stays the view's own (the caller's
// time of the view, never the write's) [CP-1].
func writtenReport(want felixv1.ShardReport, now time.Time) felixv1.ShardReport {
	rep := *want.DeepCopy()
	rep.TakenAt = metav1.NewTime(now)
	return rep
}

// sameBesidesCaughtUp reports whether a and b differ, in what placement
// reads, at most in their followers' caught-up flags.
func sameBesidesCaughtUp(a, b felixv1.ShardReport) bool { return sameReadings(a, b, false) }

// samePlacement compares what placement reads of two reports: leader,
// incarnation, storage id, epoch and, per follower, storage id and caught
// up. Positions, groups and times do not count.
func samePlacement(a, b felixv1.ShardReport) bool { return sameReadings(a, b, true) }

// sameReadings compares what placement reads of two reports, the
// followers' caught-up flags only if caughtUp.
func sameReadings(a, b felixv1.ShardReport, caughtUp bool) bool {
	if a.Leader != b.Leader || a.LeaderIncarnation != b.LeaderIncarnation || a.LeaderStorageID != b.LeaderStorageID ||
		a.Epoch != b.Epoch || a.Floor != b.Floor || len(a.Followers) != len(b.Followers) {
		return false
	}
	type line struct {
		id string
		up bool
	}
	seen := make(map[string]line, len(a.Followers))
	for _, f := range a.Followers {
		seen[f.Name] = line{f.StorageID, f.CaughtUp && caughtUp}
	}
	for _, f := range b.Followers {
		if l, ok := seen[f.Name]; !ok || l != (line{f.StorageID, f.CaughtUp && caughtUp}) {
			return false
		}
	}
	return true
}
