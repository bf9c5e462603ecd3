package controllers

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// setConditions returns existing with each of updates applied: a condition
// whose status changes gets a new lastTransitionTime, one that keeps its
// status keeps its time. The input slice is not modified.
func setConditions(existing []metav1.Condition, generation int64, now metav1.Time, updates ...metav1.Condition) []metav1.Condition {
	out := make([]metav1.Condition, len(existing))
	for i := range existing {
		out[i] = *existing[i].DeepCopy()
	}
	for _, u := range updates {
		u.ObservedGeneration = generation
		u.LastTransitionTime = now
		if prev := meta.FindStatusCondition(out, u.Type); prev != nil && prev.Status == u.Status {
			u.LastTransitionTime = prev.LastTransitionTime
		}
		meta.SetStatusCondition(&out, u)
	}
	return out
}

// cond builds a condition.
func cond(typ string, status bool, reason, message string) metav1.Condition {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: message}
}

// conditionTrue reports whether typ is True in conds.
func conditionTrue(conds []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionTrue(conds, typ)
}

// semanticEqual compares API values ignoring representation differences.
func semanticEqual(a, b any) bool { return equality.Semantic.DeepEqual(a, b) }
