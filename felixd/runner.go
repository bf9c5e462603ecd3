package felixd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// DefaultStepInterval is the pause between workload steps when
// RunConfig.StepInterval is zero.
const DefaultStepInterval = 100 * time.Millisecond

// DefaultCheckStreamEvery is the longest a holder writes on one successful
// stream check when RunConfig.CheckStreamEvery is zero [FD-4].
const DefaultCheckStreamEvery = 10 * time.Second

// RunConfig configures Run.
type RunConfig struct {
	// Lease is the workload's lease. Required.
	Lease *Lease
	// Log is the workload's shard. Required.
	Log Log
	// Workload is the state machine. Required.
	Workload Workload
	// CheckStream is called after the lease is acquired and before the
	// fenced write, and again while the holder runs, at most
	// CheckStreamEvery after its last success [FD-4]. Required; typically
	// a closure over CheckStream. At acquisition any error stops Run; later
	// a refusal (IsStreamRefused) stops Run, and any other error pauses
	// the writes until a check succeeds.
	CheckStream func(context.Context) error
	// CheckStreamEvery bounds how long the holder writes on one successful
	// stream check; zero means DefaultCheckStreamEvery.
	CheckStreamEvery time.Duration
	// SnapshotEvery is the number of outputs between snapshots; zero
	// means never.
	SnapshotEvery int
	// StepInterval is the pause between steps; zero means
	// DefaultStepInterval.
	StepInterval time.Duration
	// Clock is injected; nil means the real clock.
	Clock clock.Clock
	// Logger receives the run's log lines.
	Logger logr.Logger
}

// Run acquires the lease, checks the stream, starts a holder (catch-up and
// fenced write) and then, every StepInterval: appends the workload's next
// outputs under the tail check, snapshots and trims when due, and renews
// the lease when due. Writes come before the renewal in each step: safety
// rests on the fence, not on the holder noticing in time that its lease
// expired.
//
// The stream check runs at acquisition and whenever the last successful
// one is CheckStreamEvery old, before the step's writes: a holder never
// writes on a check older than that, so a stream whose settings stop
// allowing a holder (retention on, not fenced, ack Leader) stops it within
// CheckStreamEvery [FD-4]. The periodic check also asks the log for its
// retention (Log.Describe) and refuses it on.
//
// It returns ErrRetired when a newer epoch took over (seen by a write, or
// by the read a holder makes when its renewal finds the lease lost), an
// error matching ErrLeaseLost when the renewal failed and no newer epoch
// is visible yet, ErrRetention or ErrAckLeader when
// the stream check refused, and nil when ctx ends (after releasing the
// lease).
func Run(ctx context.Context, cfg RunConfig) error {
	if cfg.Lease == nil || cfg.Log == nil || cfg.Workload == nil {
		return errors.New("felixd: Run needs a Lease, a Log and a Workload")
	}
	if cfg.CheckStream == nil {
		return errors.New("felixd: Run needs a CheckStream [FD-4]")
	}
	every := cfg.CheckStreamEvery
	if every <= 0 {
		every = DefaultCheckStreamEvery
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	step := cfg.StepInterval
	if step <= 0 {
		step = DefaultStepInterval
	}
	log := cfg.Logger
	log.Info("campaigning for the lease")
	epoch, err := cfg.Lease.Acquire(ctx)
	if err != nil {
		return stopped(ctx, err)
	}
	log = log.WithValues("epoch", epoch)
	log.Info("lease acquired")
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := cfg.Lease.Release(rctx); err != nil {
			log.V(1).Info("lease not released", "err", err.Error())
		}
	}()
	checked, paused := clk.Now(), false
	if err := cfg.CheckStream(ctx); err != nil {
		return err
	}
	h, err := NewHolder(HolderConfig{Log: cfg.Log, Epoch: epoch, Workload: cfg.Workload, SnapshotEvery: cfg.SnapshotEvery, Logger: log})
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return stopped(ctx, err)
	}
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping", "tail", h.Expected())
			return nil
		case <-clk.After(step):
		}
		write := true
		if clk.Since(checked) >= every {
			asked := clk.Now() // the check's answer is at least this fresh
			err := cfg.CheckStream(ctx)
			if err == nil {
				err = checkLog(ctx, cfg.Log)
			}
			switch {
			case err == nil:
				checked = asked
				if paused {
					log.Info("stream check succeeded; writes resume")
				}
				paused = false
			case IsStreamRefused(err):
				log.Info("the stream no longer allows a holder; stopping", "err", err.Error())
				return err
			default:
				write = false
				if !paused {
					log.Info("stream check failed; writes paused until it succeeds", "err", err.Error())
				}
				paused = true
			}
		}
		if write {
			if err := runStep(ctx, h, cfg.Workload); err != nil {
				return stopped(ctx, err)
			}
		}
		if cfg.Lease.RenewDue() {
			if err := cfg.Lease.Renew(ctx); err != nil {
				if errors.Is(err, ErrLeaseLost) {
					return leaseLost(ctx, h, log, err)
				}
				log.V(1).Info("lease renewal failed; will retry", "err", err.Error())
			}
		}
	}
}

// leaseLostReadTimeout bounds the read a holder makes after losing its
// lease.
const leaseLostReadTimeout = 5 * time.Second

// leaseLost stops a holder whose renewal found the lease lost. It first
// reads once from its cursor: when a newer epoch already wrote or trimmed
// past it, the holder retires (ErrRetired) and says so, which tells the
// operator more than a lost lease does. A holder paused past its lease
// (SIGSTOP, a long GC, a frozen VM) can resume at any point of its loop,
// so whether the renewal or the next write notices first is chance; the
// read makes the outcome the same either way. Reading writes nothing.
func leaseLost(ctx context.Context, h *Holder, log logr.Logger, lost error) error {
	rctx, cancel := context.WithTimeout(ctx, leaseLostReadTimeout)
	defer cancel()
	if err := h.CatchUp(rctx); errors.Is(err, ErrRetired) {
		return err
	}
	log.Info("lease lost; stopping", "err", lost.Error())
	return lost
}

// checkLog refuses a log that reports its retention on [FD-4].
func checkLog(ctx context.Context, l Log) error {
	info, err := l.Describe(ctx)
	if err != nil {
		return fmt.Errorf("felixd: describe: %w", err)
	}
	if info.Retention == RetentionOn {
		return fmt.Errorf("%w: the log reports retention on [FD-4]", ErrRetention)
	}
	return nil
}

// runStep appends the workload's next outputs and snapshots when due.
func runStep(ctx context.Context, h *Holder, w Workload) error {
	outs, err := w.Next(ctx)
	if err != nil {
		return fmt.Errorf("felixd: workload: %w", err)
	}
	if err := h.Append(ctx, outs); err != nil {
		if errors.Is(err, ErrNotWritten) {
			return nil
		}
		return err
	}
	if h.SnapshotDue() {
		if err := h.Snapshot(ctx); err != nil && !errors.Is(err, ErrNotWritten) {
			return err
		}
	}
	return nil
}

// stopped returns nil for an error caused by ctx ending.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}
