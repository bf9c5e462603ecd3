package controllers

import (
	"fmt"
	"io"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// NewScheme returns a scheme with the core Kubernetes kinds and the Felix
// kinds and the VolumeSnapshot kinds, everything the operator reads and
// writes.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(felixv1.AddToScheme(s))
	utilruntime.Must(snapv1.AddToScheme(s))
	return s
}

// Options configure the reconcilers.
type Options struct {
	// Clock is the operator's clock; the real one when nil. Tests inject a
	// fake one to step time.
	Clock clock.PassiveClock
	// ScheduleClock is the clock FelixScheduledBackup schedules and
	// retention run on; Clock when nil. Tests step it to fire schedules
	// without moving the rest of the operator's time.
	ScheduleClock clock.PassiveClock
	// MaxClockSkew bounds how far a broker's clock may run ahead of the
	// operator's (DefaultMaxClockSkew when zero). [CP-1] counts a broker
	// registered without a storage id only from a view its leader took,
	// on the leader's clock, at least this long after the registration.
	MaxClockSkew time.Duration
	// Rand is the randomness of certificate keys and serials; crypto/rand
	// when nil.
	Rand io.Reader
	// BrokerAuthDelegatorRole is the ClusterRole, and the shipped
	// ClusterRoleBinding of the same name, to whose subjects the operator
	// adds each cluster's broker ServiceAccount, for the brokers'
	// authenticated /metrics (TokenReview, SubjectAccessReview); none
	// when empty (a namespace-scoped operator cannot update
	// ClusterRoleBindings).
	BrokerAuthDelegatorRole string
	// DefaultBrokerImage is the broker image of FelixClusters without
	// spec.image (the operator's --broker-image: the image of its own
	// release).
	DefaultBrokerImage string
	// RollWaitTimeout bounds a rolling update's wait for one broker's
	// leaderships to move and shards to catch up (DefaultRollWaitTimeout
	// when zero).
	RollWaitTimeout time.Duration
	// Metrics receives the reconcilers' measurements (NewMetrics); none
	// when nil.
	Metrics *Metrics
}

// DefaultMaxClockSkew is Options.MaxClockSkew when zero (the operator's
// --max-clock-skew default).
const DefaultMaxClockSkew = time.Second

// EventReporter is the name events are recorded under.
const EventReporter = "felix-operator"

// Setup registers every Felix reconciler with mgr. The FelixBroker and
// FelixShard reconcilers share one heartbeat tracker.
func Setup(mgr ctrl.Manager, opts Options) error {
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	skew := opts.MaxClockSkew
	if skew <= 0 {
		skew = DefaultMaxClockSkew
	}
	scheduleClk := opts.ScheduleClock
	if scheduleClk == nil {
		scheduleClk = clk
	}
	rec := mgr.GetEventRecorder(EventReporter)
	hb := NewHeartbeats(clk)
	c := mgr.GetClient()
	steps := []struct {
		name  string
		setup func(ctrl.Manager) error
	}{
		{"felixcluster", (&FelixClusterReconciler{Client: c, APIReader: mgr.GetAPIReader(), Clock: clk, Events: rec, Rand: opts.Rand,
			BrokerAuthDelegatorRole: opts.BrokerAuthDelegatorRole, DefaultBrokerImage: opts.DefaultBrokerImage,
			RollWaitTimeout: opts.RollWaitTimeout}).SetupWithManager},
		{"felixuser", (&FelixUserReconciler{Client: c, APIReader: mgr.GetAPIReader(), Clock: clk, Events: rec, Rand: opts.Rand}).SetupWithManager},
		{"felixbackup", (&FelixBackupReconciler{Client: c, APIReader: mgr.GetAPIReader(), Clock: clk, Events: rec, Metrics: opts.Metrics}).SetupWithManager},
		{"felixscheduledbackup", (&FelixScheduledBackupReconciler{Client: c, APIReader: mgr.GetAPIReader(), Clock: scheduleClk, Events: rec}).SetupWithManager},
		{"felixbroker", (&FelixBrokerReconciler{Client: c, Clock: clk, Heartbeats: hb, Events: rec}).SetupWithManager},
		{"felixstream", (&FelixStreamReconciler{Client: c, APIReader: mgr.GetAPIReader(), Clock: clk, Events: rec}).SetupWithManager},
		{"felixshard", (&FelixShardReconciler{Client: c, Clock: clk, Heartbeats: hb, Events: rec, MaxClockSkew: skew, Metrics: opts.Metrics}).SetupWithManager},
	}
	for _, s := range steps {
		if err := s.setup(mgr); err != nil {
			return fmt.Errorf("set up %s reconciler: %w", s.name, err)
		}
	}
	return nil
}

// CacheOptions restricts the manager's cache to what Felix owns where a
// cluster holds many objects Felix never needs: only Leases, Pods, PVCs
// and Secrets labelled with a Felix cluster are cached (not every node's
// Lease, not every Secret), and of the cluster-scoped ClusterRoleBindings
// only the brokers' auth-delegator binding.
func CacheOptions() cache.Options {
	hasCluster, err := labels.NewRequirement(LabelCluster, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant requirement; cannot fail
	}
	sel := labels.NewSelector().Add(*hasCluster)
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}:         {Label: sel},
		&corev1.Pod{}:                   {Label: sel},
		&corev1.PersistentVolumeClaim{}: {Label: sel},
		// Only the certificate Secrets the operator makes (or has
		// cert-manager fill); a CA Secret the user brings is read uncached.
		&corev1.Secret{}: {Label: sel},
		// The one ClusterRoleBinding the operator may read and update
		// (its RBAC names it; a list of all would be refused).
		&rbacv1.ClusterRoleBinding{}: {Field: fields.OneTermEqualSelector("metadata.name", DefaultBrokerAuthDelegatorRole)},
	}}
}
