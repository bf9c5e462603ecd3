package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/cron"
)

// LabelScheduledBackup names, on a FelixBackup, the FelixScheduledBackup
// that created it.
const LabelScheduledBackup = "felix.dev/scheduled-backup"

// AnnotationScheduledAt is, on a FelixBackup a schedule created, the
// scheduled time it was taken for (RFC 3339, UTC); retention's maxAge
// counts from it.
const AnnotationScheduledAt = "felix.dev/scheduled-at"

// Reasons of a FelixScheduledBackup's Ready condition.
const (
	// ReasonScheduled: backups are taken on schedule.
	ReasonScheduled = "Scheduled"
	// ReasonInvalidSchedule: spec.schedule does not parse.
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonClusterNotFound: spec.cluster names no FelixCluster.
	ReasonClusterNotFound = "ClusterNotFound"
	// ReasonSuspended: spec.suspend is set.
	ReasonSuspended = "Suspended"
)

// FelixScheduledBackupReconciler creates a FelixScheduledBackup's
// FelixBackups at its schedule's times and prunes them by its retention.
type FelixScheduledBackupReconciler struct {
	Client client.Client
	// APIReader lists the schedule's backups uncached, so a backup just
	// created is never missed; Client when nil.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Events    events.EventRecorder
}

// ScheduledBackupName is the FelixBackup schedule creates for the
// scheduled time at: <schedule>-<yyyymmddhhmmss>, UTC.
func ScheduledBackupName(schedule string, at time.Time) string {
	return schedule + "-" + at.UTC().Format("20060102150405")
}

// Reconcile prunes the schedule's finished backups by its retention, then,
// unless the schedule is invalid or suspended or its cluster missing,
// creates the backup due now, if any, and requeues at the next scheduled
// time. A backup is due for the latest scheduled time after the last one
// handled (or after creation): however many times were missed while the
// operator was down, one catch-up backup is taken. A due backup is
// skipped (with an event) while an earlier backup of the schedule is
// Pending or Running. The status is computed once and patched at the end.
func (r *FelixScheduledBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sb felixv1.FelixScheduledBackup
	if err := r.Client.Get(ctx, req.NamespacedName, &sb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sb.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now().UTC()
	backups, err := r.ownedBackups(ctx, &sb)
	if err != nil {
		return ctrl.Result{}, err
	}
	if backups, err = r.prune(ctx, &sb, backups, now); err != nil {
		return ctrl.Result{}, err
	}
	st := sb.Status.DeepCopy()
	st.ObservedGeneration = sb.Generation
	st.LastSuccessfulBackup = ""
	for i := len(backups) - 1; i >= 0; i-- {
		if backups[i].Status.Phase == felixv1.BackupCompleted {
			st.LastSuccessfulBackup = backups[i].Name
			break
		}
	}
	res, err := r.schedule(ctx, &sb, st, backups, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	return res, r.patchStatus(ctx, &sb, st)
}

// schedule sets st's schedule times and Ready condition, creating the
// backup due at now, if any.
func (r *FelixScheduledBackupReconciler) schedule(ctx context.Context, sb *felixv1.FelixScheduledBackup, st *felixv1.FelixScheduledBackupStatus,
	backups []felixv1.FelixBackup, now time.Time) (ctrl.Result, error) {
	mnow := metav1.NewTime(now)
	sched, err := cron.Parse(sb.Spec.Schedule)
	if err != nil {
		st.NextScheduleTime = nil
		st.Conditions = setConditions(st.Conditions, sb.Generation, mnow, cond(felixv1.ConditionReady, false, ReasonInvalidSchedule, err.Error()))
		return ctrl.Result{}, nil
	}
	if sb.Spec.Suspend {
		st.NextScheduleTime = nil
		st.Conditions = setConditions(st.Conditions, sb.Generation, mnow, cond(felixv1.ConditionReady, false, ReasonSuspended, "spec.suspend is set: no backups are taken"))
		return ctrl.Result{}, nil
	}
	next := metav1.NewTime(sched.Next(now))
	st.NextScheduleTime = &next
	var c felixv1.FelixCluster
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: sb.Spec.Cluster}, &c); {
	case apierrors.IsNotFound(err):
		// The FelixCluster watch brings the schedule back when it appears;
		// the times missed meanwhile count as missed (one catch-up).
		st.Conditions = setConditions(st.Conditions, sb.Generation, mnow,
			cond(felixv1.ConditionReady, false, ReasonClusterNotFound, fmt.Sprintf("FelixCluster %s not found: no backups are taken", sb.Spec.Cluster)))
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get FelixCluster %s: %w", sb.Spec.Cluster, err)
	}
	if due := dueTime(sb, sched, now); !due.IsZero() {
		if err := r.takeDue(ctx, sb, st, backups, due); err != nil {
			return ctrl.Result{}, err
		}
	}
	st.Conditions = setConditions(st.Conditions, sb.Generation, mnow,
		cond(felixv1.ConditionReady, true, ReasonScheduled, "next backup at "+next.UTC().Format(time.RFC3339)))
	return ctrl.Result{RequeueAfter: next.Sub(now)}, nil
}

// dueTime is the scheduled time a backup is due for at now, or zero: now
// itself for an immediate schedule that never took one, else the latest
// scheduled time after the last one handled (or after the schedule's
// creation) and not after now.
func dueTime(sb *felixv1.FelixScheduledBackup, sched cron.Schedule, now time.Time) time.Time {
	if sb.Status.LastScheduleTime == nil {
		if sb.Spec.Immediate {
			return now.Truncate(time.Second)
		}
		return sched.Last(sb.CreationTimestamp.Time, now)
	}
	return sched.Last(sb.Status.LastScheduleTime.Time, now)
}

// takeDue creates the backup for the scheduled time due, or skips it while
// an earlier backup is Pending or Running; either way due is handled.
func (r *FelixScheduledBackupReconciler) takeDue(ctx context.Context, sb *felixv1.FelixScheduledBackup, st *felixv1.FelixScheduledBackupStatus,
	backups []felixv1.FelixBackup, due time.Time) error {
	log := ctrl.LoggerFrom(ctx)
	name := ScheduledBackupName(sb.Name, due)
	mdue := metav1.NewTime(due)
	for i := range backups {
		if backups[i].Name == name { // created by an earlier try whose status write failed
			st.LastScheduleTime, st.LastBackup = &mdue, name
			return nil
		}
	}
	for i := range backups {
		if b := &backups[i]; b.Status.Phase == "" || b.Status.Phase == felixv1.BackupPending || b.Status.Phase == felixv1.BackupRunning {
			log.Info("scheduled backup skipped: the previous one is not finished", "scheduledAt", due, "running", b.Name)
			r.event(sb, b, corev1.EventTypeWarning, "BackupSkipped", "Skip",
				"backup for %s skipped: FelixBackup %s is still %s", due.Format(time.RFC3339), b.Name, phaseOrPending(b.Status.Phase))
			st.LastScheduleTime = &mdue
			return nil
		}
	}
	labels := make(map[string]string, len(sb.Spec.BackupLabels)+1)
	for k, v := range sb.Spec.BackupLabels {
		labels[k] = v
	}
	labels[LabelScheduledBackup] = sb.Name
	b := &felixv1.FelixBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: name, Labels: labels,
			Annotations: map[string]string{AnnotationScheduledAt: due.UTC().Format(time.RFC3339)}},
		Spec: felixv1.FelixBackupSpec{Cluster: sb.Spec.Cluster},
	}
	if sb.Spec.BackupOwnerReference == felixv1.BackupOwnerSelf {
		if err := controllerutil.SetControllerReference(sb, b, r.Client.Scheme()); err != nil {
			return fmt.Errorf("own FelixBackup %s: %w", name, err)
		}
	}
	switch err := r.Client.Create(ctx, b, client.FieldOwner(OperatorFieldManager)); {
	case apierrors.IsAlreadyExists(err):
	case err != nil:
		return fmt.Errorf("create FelixBackup %s: %w", name, err)
	default:
		log.Info("scheduled backup created", "backup", name, "scheduledAt", due)
		r.event(sb, b, corev1.EventTypeNormal, "BackupCreated", "Create", "FelixBackup %s created for %s", name, due.Format(time.RFC3339))
	}
	st.LastScheduleTime, st.LastBackup = &mdue, name
	return nil
}

func phaseOrPending(p felixv1.BackupPhase) felixv1.BackupPhase {
	if p == "" {
		return felixv1.BackupPending
	}
	return p
}

// patchStatus writes st when it differs from the schedule's status.
func (r *FelixScheduledBackupReconciler) patchStatus(ctx context.Context, sb *felixv1.FelixScheduledBackup, st *felixv1.FelixScheduledBackupStatus) error {
	if semanticEqual(*st, sb.Status) {
		return nil
	}
	orig := sb.DeepCopy()
	sb.Status = *st
	if err := r.Client.Status().Patch(ctx, sb, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		return fmt.Errorf("patch FelixScheduledBackup %s status: %w", sb.Name, err)
	}
	return nil
}

func (r *FelixScheduledBackupReconciler) event(sb *felixv1.FelixScheduledBackup, related *felixv1.FelixBackup, typ, reason, action, note string, args ...any) {
	if r.Events != nil {
		r.Events.Eventf(sb, related, typ, reason, action, note, args...)
	}
}

// SetupWithManager registers the reconciler: it runs for changes of a
// schedule and of its backups, and for FelixClusters of its namespace
// appearing, changing spec or going (a missing cluster, a restore naming
// a backup).
func (r *FelixScheduledBackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("felixscheduledbackup").
		For(&felixv1.FelixScheduledBackup{}).
		// By label, not owner: backups have an owner only with
		// backupOwnerReference Self.
		Watches(&felixv1.FelixBackup{}, handler.EnqueueRequestsFromMapFunc(scheduleOfBackup)).
		Watches(&felixv1.FelixCluster{}, handler.EnqueueRequestsFromMapFunc(r.schedulesOfNamespace),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// schedulesOfNamespace maps a FelixCluster to every FelixScheduledBackup
// of its namespace.
func (r *FelixScheduledBackupReconciler) schedulesOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list felixv1.FelixScheduledBackupList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list FelixScheduledBackups for a FelixCluster change", "cluster", o.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, sb := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sb.Namespace, Name: sb.Name}})
	}
	return out
}

// scheduleOfBackup maps a FelixBackup to the FelixScheduledBackup its
// label names, if any.
func scheduleOfBackup(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[LabelScheduledBackup]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}
