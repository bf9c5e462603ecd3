package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// SettleRestorePoint runs the operator's restore-point settlement of one
// broker pod once, with c as client and reader, so a test can order the
// pod's status, its deletion and the operator's look deterministically.
func SettleRestorePoint(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	r := &FelixClusterReconciler{Client: c, APIReader: c}
	return r.settleRestorePoint(ctx, &felixv1.FelixCluster{}, pod)
}

// ApplyShardAssignment writes assignment a as the shard reconciler writes
// its status, deciding from the view sh (which may be stale).
func ApplyShardAssignment(ctx context.Context, c client.Client, sh *felixv1.FelixShard, a *felixv1.Assignment) error {
	r := &FelixShardReconciler{Client: c}
	return r.apply(ctx, sh, shardStatus{Assignment: a, CaughtUp: sh.Status.CaughtUp, Conditions: sh.Status.Conditions})
}

// EnsureClusterTLS runs the FelixCluster reconciler's certificate step
// once for c (brokers 0..Spec.Brokers-1) as if the time were now, so a
// test can step past a renewal without moving the shared operator's
// clock. It returns the brokers whose certificate Secret is ready.
func EnsureClusterTLS(ctx context.Context, cl client.Client, c *felixv1.FelixCluster, now time.Time) (map[string]bool, error) {
	r := &FelixClusterReconciler{Client: cl, APIReader: cl, Clock: clocktesting.NewFakePassiveClock(now)}
	var brokers []string
	for i := int32(0); i < c.Spec.Brokers; i++ {
		brokers = append(brokers, BrokerName(c.Name, i))
	}
	obs, err := r.ensureTLS(ctx, c, brokers)
	return obs.Ready, err
}

// EnsureUserCertificate runs the FelixUser reconciler's certificate step
// once for u as if the time were now and returns the Ready condition's
// reason and the certificate's NotAfter.
func EnsureUserCertificate(ctx context.Context, cl client.Client, u *felixv1.FelixUser, now time.Time) (string, time.Time, error) {
	r := &FelixUserReconciler{Client: cl, APIReader: cl, Clock: clocktesting.NewFakePassiveClock(now)}
	obs, err := r.ensure(ctx, u)
	var notAfter time.Time
	if obs.NotAfter != nil {
		notAfter = obs.NotAfter.Time
	}
	return obs.Ready.Reason, notAfter, err
}

// ClusterTLSCondition runs the certificate step once for c (as
// EnsureClusterTLS) and returns the TLSReady condition it computed.
func ClusterTLSCondition(ctx context.Context, cl client.Client, c *felixv1.FelixCluster, now time.Time) (string, map[string]bool, error) {
	r := &FelixClusterReconciler{Client: cl, APIReader: cl, Clock: clocktesting.NewFakePassiveClock(now)}
	var brokers []string
	for i := int32(0); i < c.Spec.Brokers; i++ {
		brokers = append(brokers, BrokerName(c.Name, i))
	}
	obs, err := r.ensureTLS(ctx, c, brokers)
	return obs.Condition.Reason, obs.Ready, err
}

// BrokerImage is brokerImage, for its table test.
var BrokerImage = brokerImage

// IndexRanges is how the operator names shard indexes in events.
var IndexRanges = indexRanges
