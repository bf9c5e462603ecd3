package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

// DefaultMaintainInterval is the time between maintenance passes when
// Options.MaintainInterval is zero.
const DefaultMaintainInterval = time.Minute

// PassResult totals one maintenance pass: what deletion below the floor
// and retention removed (Start left zero), the logs that lost segments,
// the failed steps and, among them, retention refused on a fenced log.
type PassResult struct {
	Floor, Retention logstore.DeleteResult
	Logs             int
	Errors           int
	Refused          int
}

// Deleted reports whether the pass deleted anything.
func (p PassResult) Deleted() bool { return p.Floor.Segments+p.Retention.Segments > 0 }

func (p *PassResult) add(floor, ret logstore.DeleteResult) {
	addDelete(&p.Floor, floor)
	addDelete(&p.Retention, ret)
	if floor.Segments+ret.Segments > 0 {
		p.Logs++
	}
}

func addDelete(t *logstore.DeleteResult, r logstore.DeleteResult) {
	t.Segments += r.Segments
	t.Records += r.Records
	t.Bytes += r.Bytes
}

// MaintainLog deletes lg's whole segments below its floor, then applies its
// retention policy, and returns both results and the log's first stored
// offset afterwards. A failed step does not skip the other; the errors are
// joined. Both steps are the store's and never delete the active segment
// nor an uncommitted record; they take the store's write lock, so they may
// run beside the shard's drive loop but should not run on it.
func MaintainLog(ctx context.Context, lg *logstore.Log) (floor, ret logstore.DeleteResult, start uint64, err error) {
	start = lg.Describe().Start
	var errs []error
	if floor, err = lg.DeleteBelowFloor(ctx); err != nil {
		errs = append(errs, err)
	} else {
		start = max(start, floor.Start)
	}
	if ret, err = lg.ApplyRetention(ctx); err != nil {
		errs = append(errs, err)
	} else {
		start = max(start, ret.Start)
	}
	return floor, ret, start, errors.Join(errs...)
}

// MaintainStore runs MaintainLog on every log of store (a standalone
// broker, whose logs have no other replica to keep in step) and totals the
// results; errors are counted and joined, and the other logs still run.
func MaintainStore(ctx context.Context, store *logstore.Store) (PassResult, error) {
	var p PassResult
	var errs []error
	for _, id := range store.Logs() {
		lg, ok := store.Lookup(id)
		if !ok {
			continue
		}
		floor, ret, _, err := MaintainLog(ctx, lg)
		p.add(floor, ret)
		if err != nil {
			p.count(err)
			errs = append(errs, err)
		}
	}
	if err := collectValueLog(ctx, store); err != nil {
		errs = append(errs, err)
	}
	return p, errors.Join(errs...)
}

// collectValueLog gives back the value-log space of what a pass deleted
// (batches at or above the store's value threshold live in badger's value
// log, whose space returns only through its garbage collection). It runs
// every pass, not only after deletions: a value-log file becomes
// collectable only once badger has moved on to the next one, which may be
// long after the deletion that emptied it.
func collectValueLog(ctx context.Context, store *logstore.Store) error {
	if err := store.CollectValueLog(ctx); err != nil {
		return fmt.Errorf("value log collection: %w", err)
	}
	return nil
}

func (p *PassResult) count(err error) {
	p.Errors++
	if errors.Is(err, logstore.ErrRetentionOnFencedStream) {
		p.Refused++
	}
}

// Maintain runs one maintenance pass over every shard this Manager runs
// now: for each of a shard's logs, MaintainLog outside the shard's
// goroutine (the deletion takes the store's write lock and may be long),
// then, if the log's first stored offset moved, an event into the shard's
// loop that feeds the core Compacted(log, start), so a leader never offers
// to ship what is gone and catches a follower up from its new start. A
// failing log is logged and counted and the pass goes on. It records the
// pass in Options.Metrics and logs a line when it deleted something.
func (m *Manager) Maintain(ctx context.Context) (PassResult, error) {
	t0 := time.Now()
	m.mu.Lock()
	all := make([]*shard, 0, len(m.shards))
	for _, s := range m.shards {
		all = append(all, s)
	}
	m.mu.Unlock()
	var p PassResult
	var errs []error
	for _, s := range all {
		for _, l := range record.LogKinds {
			if err := ctx.Err(); err != nil {
				return p, err
			}
			before := s.logs[l].Describe().Start
			floor, ret, start, err := MaintainLog(ctx, s.logs[l])
			p.add(floor, ret)
			if err != nil {
				p.count(err)
				errs = append(errs, fmt.Errorf("%s/%s: %w", s.id, l, err))
				m.o.Logger.Error(err, "maintenance of a log failed", "shard", s.id.String(), "log", l.String())
			}
			if start > before {
				s.post(event{kind: evCompacted, log: l, offset: start})
			}
		}
	}
	if err := collectValueLog(ctx, m.o.Store); err != nil {
		errs = append(errs, err)
		m.o.Logger.Error(err, "maintenance could not collect the value log")
	}
	ReportPass(m.o.Logger, m.o.Metrics, p, time.Since(t0))
	return p, errors.Join(errs...)
}

// ReportPass records a finished maintenance pass in metrics (nil: none)
// and logs one line when it deleted something.
func ReportPass(log logr.Logger, metrics *Metrics, p PassResult, took time.Duration) {
	metrics.ObservePass(p, took)
	if p.Deleted() {
		log.Info("maintenance deleted segments", "logs", p.Logs,
			"floorSegments", p.Floor.Segments, "floorRecords", p.Floor.Records, "floorBytes", p.Floor.Bytes,
			"retentionSegments", p.Retention.Segments, "retentionRecords", p.Retention.Records, "retentionBytes", p.Retention.Bytes,
			"took", took.String())
	}
}

// runMaintenance runs Maintain every Options.MaintainInterval until the
// Manager closes.
func (m *Manager) runMaintenance(ctx context.Context) {
	defer close(m.maintDone)
	t := time.NewTicker(m.o.MaintainInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, _ = m.Maintain(ctx) // logged and counted inside
	}
}

// LogPolicy is what a stream's spec asks of its shards' data logs:
// retention (zero: off) and whether tail-conditional writers fence with it.
type LogPolicy struct {
	Retention logstore.RetentionPolicy
	Fenced    bool
}

// ErrRetentionOnFencedStream refuses a LogPolicy that is both fenced and
// has retention [TR-7]; it wraps logstore.ErrRetentionOnFencedStream.
var ErrRetentionOnFencedStream = fmt.Errorf("replica: %w", logstore.ErrRetentionOnFencedStream)

// ErrUnfenceWithRecords refuses a LogPolicy that unfences a fenced data
// log, empty or not [FD-4]: a holder may be running on the stream, and
// unfencing is the way to turning retention on under it. (The name is
// kept from when only a log holding records stayed fenced.)
var ErrUnfenceWithRecords = errors.New("replica: a fenced log stays fenced")

// SetLogPolicy applies p to the data log of shard (EnsureShard first). It
// changes only what differs from the log's stored settings (each change is
// persisted and synced), in the order the store accepts: retention off
// before fencing, unfencing before retention on.
//
// A policy that unfences a fenced log is refused [FD-4], whatever the log
// holds: a log that was ever fenced stays fenced (the bit is in its
// persisted meta, and ResetAt keeps it). The refusal is logged and an
// error wrapping ErrUnfenceWithRecords is returned; the rest of p is
// applied to a fenced log (so its retention is refused as below). The API
// fixes `fenced` at creation; this keeps a spec from before that rule, or
// a stream recreated under the same name, from turning retention on under
// a running holder, on every replica alike: one whose log is empty (newly
// added, or emptied after damage) would otherwise take retention, keep it
// once copied, and could lead with it [TR-7].
//
// A policy that is fenced and has retention is refused (the API refuses it
// too; retention can delete the write that fences a stale writer): the
// fence is applied, retention stays off, the refusal is logged and counted
// (felix_broker_retention_refused_total) and an error wrapping
// ErrRetentionOnFencedStream is returned.
func (m *Manager) SetLogPolicy(id record.ShardID, p LogPolicy) error {
	s, err := m.shard(id)
	if err != nil {
		return err
	}
	lg := s.logs[record.LogData]
	cur := lg.Describe()
	var refused error
	if cur.Fenced && !p.Fenced {
		refused = fmt.Errorf("%s: unfence a fenced log (base %d, tail %d): %w", id, cur.Base, cur.Tail, ErrUnfenceWithRecords)
		m.o.Logger.Error(refused, "unfencing refused; the stream stays fenced", "shard", id.String())
		p.Fenced = true
	}
	if p.Fenced && p.Retention.Enabled() {
		ret := fmt.Errorf("%s: retention %+v on a fenced stream: %w", id, p.Retention, ErrRetentionOnFencedStream)
		m.o.Logger.Error(ret, "retention refused; the stream stays fenced with retention off", "shard", id.String())
		m.o.Metrics.retentionRefused()
		p.Retention = logstore.RetentionPolicy{}
		refused = errors.Join(refused, ret)
	}
	if cur.Retention != p.Retention && !p.Retention.Enabled() {
		if err := lg.SetRetention(p.Retention); err != nil {
			return errors.Join(refused, fmt.Errorf("%s: retention off: %w", id, err))
		}
	}
	if cur.Fenced != p.Fenced {
		if err := lg.SetFenced(p.Fenced); err != nil {
			return errors.Join(refused, fmt.Errorf("%s: fenced=%t: %w", id, p.Fenced, err))
		}
	}
	if cur.Retention != p.Retention && p.Retention.Enabled() {
		if err := lg.SetRetention(p.Retention); err != nil {
			return errors.Join(refused, fmt.Errorf("%s: retention %+v: %w", id, p.Retention, err))
		}
	}
	if cur.Retention != p.Retention || cur.Fenced != p.Fenced {
		m.o.Logger.Info("log policy applied", "shard", id.String(), "fenced", p.Fenced,
			"maxAge", p.Retention.MaxAge.String(), "maxBytes", p.Retention.MaxBytes)
	}
	return refused
}
