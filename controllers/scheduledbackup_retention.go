package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// ownedBackups lists the FelixBackups sb created (scheduledBy), oldest
// scheduled time first.
func (r *FelixScheduledBackupReconciler) ownedBackups(ctx context.Context, sb *felixv1.FelixScheduledBackup) ([]felixv1.FelixBackup, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var list felixv1.FelixBackupList
	if err := reader.List(ctx, &list, client.InNamespace(sb.Namespace), client.MatchingLabels{LabelScheduledBackup: sb.Name}); err != nil {
		return nil, fmt.Errorf("list FelixBackups of schedule %s: %w", sb.Name, err)
	}
	out := list.Items[:0]
	for _, b := range list.Items {
		if b.DeletionTimestamp == nil && scheduledBy(&b, sb) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b felixv1.FelixBackup) int {
		if c := scheduledAt(&a).Compare(scheduledAt(&b)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// scheduledAt is the scheduled time a backup was created for: its
// AnnotationScheduledAt, else its creation time.
func scheduledAt(b *felixv1.FelixBackup) time.Time {
	if t, err := time.Parse(time.RFC3339, b.Annotations[AnnotationScheduledAt]); err == nil {
		return t
	}
	return b.CreationTimestamp.Time
}

// prune deletes the backups retention gives up (retentionVictims) and
// returns the others, in order.
func (r *FelixScheduledBackupReconciler) prune(ctx context.Context, sb *felixv1.FelixScheduledBackup, backups []felixv1.FelixBackup, now time.Time) ([]felixv1.FelixBackup, error) {
	if sb.Spec.Retention == nil {
		return backups, nil
	}
	victims := retentionVictims(backups, sb.Spec.Retention, nil, now)
	if len(victims) == 0 {
		return backups, nil
	}
	// Read uncached: a cluster just created to restore from a backup
	// must keep it.
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var clusters felixv1.FelixClusterList
	if err := reader.List(ctx, &clusters, client.InNamespace(sb.Namespace)); err != nil {
		return nil, fmt.Errorf("list FelixClusters for the backups they restore: %w", err)
	}
	restoring := map[string]bool{}
	for _, c := range clusters.Items {
		if c.Spec.Restore != nil {
			restoring[c.Spec.Restore.Backup] = true
		}
	}
	victims = retentionVictims(backups, sb.Spec.Retention, restoring, now)
	kept := make([]felixv1.FelixBackup, 0, len(backups))
	for i := range backups {
		b := &backups[i]
		why, doomed := victims[b.Name]
		if !doomed {
			kept = append(kept, *b)
			continue
		}
		err := r.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("prune FelixBackup %s: %w", b.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("scheduled backup pruned", "backup", b.Name, "phase", b.Status.Phase, "why", why)
		r.event(sb, b, corev1.EventTypeNormal, "BackupPruned", "Delete", "FelixBackup %s (%s) deleted: %s", b.Name, b.Status.Phase, why)
	}
	return kept, nil
}

// retentionVictims returns the backups (oldest first, as ownedBackups
// orders them) that retention deletes at now, each with the reason.
// Only finished backups go: a Completed one beyond the newest Keep
// Completed, a Failed one beyond the newest Keep Failed, or either
// scheduled more than MaxAge ago; either bound suffices. Never the newest
// Completed backup (so MaxAge alone never leaves the schedule without a
// usable backup), and never one in restoring (a FelixCluster's
// spec.restore.backup).
func retentionVictims(backups []felixv1.FelixBackup, ret *felixv1.BackupRetention, restoring map[string]bool, now time.Time) map[string]string {
	victims := map[string]string{}
	seen := map[felixv1.BackupPhase]int32{}
	for i := len(backups) - 1; i >= 0; i-- {
		b := &backups[i]
		phase := b.Status.Phase
		if phase != felixv1.BackupCompleted && phase != felixv1.BackupFailed {
			continue
		}
		seen[phase]++
		if phase == felixv1.BackupCompleted && seen[phase] == 1 || restoring[b.Name] {
			continue
		}
		switch {
		case ret.Keep != nil && seen[phase] > *ret.Keep:
			victims[b.Name] = fmt.Sprintf("beyond the newest %d %s backups (retention.keep)", *ret.Keep, phase)
		case ret.MaxAge != nil && now.Sub(scheduledAt(b)) > ret.MaxAge.Duration:
			victims[b.Name] = fmt.Sprintf("scheduled more than %s ago (retention.maxAge)", ret.MaxAge.Duration)
		}
	}
	return victims
}

// scheduledBy reports whether b is a backup sb took: labelled with sb's
// name, annotated with its scheduled time, and either controlled by sb
// (backupOwnerReference Self) or by nothing (None) with sb's name prefix.
// A backup another object controls, or one made by hand, is never
// counted, so retention never deletes it.
func scheduledBy(b *felixv1.FelixBackup, sb *felixv1.FelixScheduledBackup) bool {
	if b.Labels[LabelScheduledBackup] != sb.Name {
		return false
	}
	if metav1.IsControlledBy(b, sb) {
		return true
	}
	_, stamped := b.Annotations[AnnotationScheduledAt]
	return metav1.GetControllerOf(b) == nil && stamped && strings.HasPrefix(b.Name, sb.Name+"-")
}
