package podrunner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Runner plays the kubelet (and the scheduler, the PV binder and the
// pvc-protection controller) of one local node. Create it with New and
// start it with Run; its methods Kill, Freeze, Thaw and WipeVolume inject
// faults, and in bridge container mode Partition and Heal.
type Runner struct {
	cfg    Config
	log    logr.Logger
	mgr    manager.Manager
	client client.Client // cached reads, direct writes
	reader client.Reader // uncached reads
	now    func() time.Time

	volMu sync.Mutex // serializes claim directory provisioning
	// power holds the mounted power-loss claims by "namespace/claim", and
	// powerRand draws boot ids and tearing seeds; both under volMu.
	power     map[string]*powerClaim
	powerRand *rand.Rand

	// net is the bridge network in bridge container mode, else nil;
	// netRemoved guards its removal (Run's end or Close).
	net        *BridgeNetwork
	netRemoved sync.Once

	mu      sync.Mutex
	runCtx  context.Context // nil until Run; workers live in it
	workers map[types.NamespacedName]*podWorker
	wg      sync.WaitGroup
}

// New builds a Runner; nothing runs until Run. In bridge container mode
// (Config.Docker.Network set) it creates the Docker network if it does not
// exist; Run removes it when it returns, or Close if Run is never called.
func New(cfg Config) (*Runner, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var bridge *BridgeNetwork
	if c.bridge() {
		if bridge, err = ensureNetwork(*c.Docker, c.Logger); err != nil {
			return nil, err
		}
		if c.Addresses == nil {
			book, err := NewSubnetAddressBook(filepath.Join(c.StateDir, "addresses-"+bridge.Name+".json"), bridge.Subnet, bridge.Gateway)
			if err != nil {
				closeNetwork(c, bridge)
				return nil, err
			}
			c.Addresses = book
		}
	}
	r, err := newRunner(c)
	if err != nil {
		closeNetwork(c, bridge)
		return nil, err
	}
	r.net = bridge
	return r, nil
}

// closeNetwork removes a network New created, when New fails.
func closeNetwork(c Config, n *BridgeNetwork) {
	if n != nil && n.Created {
		if err := removeNetwork(c.Docker.dockerCLI(), n); err != nil {
			c.Logger.Error(err, "remove bridge network", "network", n.Name)
		}
	}
}

func newRunner(c Config) (*Runner, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 c.Logger,
	}
	if len(c.Namespaces) > 0 {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range c.Namespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(c.RestConfig, opts)
	if err != nil {
		return nil, fmt.Errorf("podrunner: manager: %w", err)
	}
	r := &Runner{
		cfg: c, log: c.Logger, mgr: mgr, client: mgr.GetClient(), reader: mgr.GetAPIReader(),
		now: c.Now, workers: map[types.NamespacedName]*podWorker{},
		power: map[string]*powerClaim{},
	}
	if c.PowerLoss != nil {
		r.powerRand = rand.New(rand.NewPCG(c.PowerLoss.Seed, 0x706f776572))
	}
	copts := controller.Options{SkipNameValidation: ptr.To(true), MaxConcurrentReconciles: 4}
	if err := ctrl.NewControllerManagedBy(mgr).Named("podrunner-pods").For(&corev1.Pod{}).
		WithOptions(copts).Complete(reconcile.Func(r.reconcilePod)); err != nil {
		return nil, fmt.Errorf("podrunner: pod controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("podrunner-claims").For(&corev1.PersistentVolumeClaim{}).
		WithOptions(copts).Complete(reconcile.Func(r.reconcileClaim)); err != nil {
		return nil, fmt.Errorf("podrunner: claim controller: %w", err)
	}
	return r, nil
}

// Run registers the Node and runs pods until ctx ends, then stops every
// process it started (SIGTERM, SIGKILL after at most ShutdownGrace) and
// returns. Pod objects are left as they are, as when a node goes away.
func Run(ctx context.Context, cfg Config) error {
	r, err := New(cfg)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Run runs the runner until ctx ends; see the package function Run.
func (r *Runner) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		r.wg.Wait()
		// Every container has exited: the power-loss claims can be
		// unmounted and the network can go.
		if err := r.unmountAllPower(); err != nil {
			r.log.Error(err, "unmount power-loss claims")
		}
		if err := r.Close(); err != nil {
			r.log.Error(err, "remove bridge network")
		}
	}()
	r.mu.Lock()
	if r.runCtx != nil {
		r.mu.Unlock()
		return errors.New("podrunner: Run called twice")
	}
	r.runCtx = ctx
	r.mu.Unlock()
	if err := r.registerNode(ctx); err != nil {
		return err
	}
	r.log.Info("podrunner started", "node", r.cfg.NodeName, "stateDir", r.cfg.StateDir)
	return r.mgr.Start(ctx)
}

// registerNode creates (or refreshes) the runner's Node with a Ready
// condition, so anything reading nodes (zone spreading) finds it.
func (r *Runner) registerNode(ctx context.Context) error {
	lbls := map[string]string{"kubernetes.io/hostname": r.cfg.NodeName, "kubernetes.io/os": "linux"}
	for k, v := range r.cfg.NodeLabels {
		lbls[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.NodeName, Labels: lbls}}
	if err := r.client.Create(ctx, node); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("podrunner: register node: %w", err)
		}
		if err := r.reader.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return fmt.Errorf("podrunner: register node: %w", err)
		}
		for k, v := range lbls {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k] = v
		}
		if err := r.client.Update(ctx, node); err != nil {
			return fmt.Errorf("podrunner: register node: %w", err)
		}
	}
	now := metav1.NewTime(r.now())
	node.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "PodRunnerReady",
			Message: "felix podrunner is running", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: r.hostIP()}, {Type: corev1.NodeHostName, Address: r.cfg.NodeName}},
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("250"),
		},
	}
	node.Status.Allocatable = node.Status.Capacity
	if err := r.client.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("podrunner: node status: %w", err)
	}
	return nil
}

func (r *Runner) selects(pod *corev1.Pod) bool {
	return r.cfg.Selector == nil || r.cfg.Selector.Matches(labels.Set(pod.Labels))
}

// reconcilePod binds, starts, stops and finally deletes pods.
func (r *Runner) reconcilePod(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	err := r.client.Get(ctx, req.NamespacedName, &pod)
	if apierrors.IsNotFound(err) {
		// Deleted outright (grace 0): stop whatever still runs.
		if w := r.worker(req.NamespacedName); w != nil {
			if w.isDone() {
				r.forget(w)
			} else {
				w.requestStop(specGrace(w.pod), false)
			}
		}
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if !r.selects(&pod) {
		return reconcile.Result{}, nil
	}
	if pod.DeletionTimestamp == nil {
		gone, err := r.orphaned(ctx, &pod)
		if err != nil {
			// The check is retried at the next resync; it never holds
			// up the object's own reconcile.
			r.log.V(1).Info("owner check failed", "object", req.String(), "err", err.Error())
		}
		if gone {
			return reconcile.Result{}, r.collect(ctx, "Pod", &pod)
		}
	}
	res, err := r.syncPod(ctx, &pod)
	return withGC(&pod, res, err)
}

// syncPod binds, starts or stops one pod.
func (r *Runner) syncPod(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pod)}
	if pod.Spec.NodeName == "" {
		if pod.DeletionTimestamp != nil {
			return reconcile.Result{}, r.deleteNow(ctx, pod)
		}
		return reconcile.Result{}, r.bind(ctx, pod)
	}
	if pod.Spec.NodeName != r.cfg.NodeName {
		return reconcile.Result{}, nil
	}
	w := r.worker(req.NamespacedName)
	if w != nil && w.uid != pod.UID {
		if !w.isDone() {
			// An earlier pod of the same name still winds down.
			w.requestStop(specGrace(w.pod), false)
			return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
		}
		r.forget(w)
		w = nil
	}
	if pod.DeletionTimestamp != nil {
		if w == nil {
			return reconcile.Result{}, r.deleteNow(ctx, pod)
		}
		w.mu.Lock()
		finished := w.finished
		w.mu.Unlock()
		if finished {
			r.forget(w)
			return reconcile.Result{}, r.deleteNow(ctx, pod)
		}
		grace := specGrace(pod)
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		w.requestStop(grace, true)
		return reconcile.Result{}, nil
	}
	if w != nil {
		return reconcile.Result{}, nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return reconcile.Result{}, nil // terminal pods never run again
	}
	r.start(pod)
	return reconcile.Result{}, nil
}

func (r *Runner) worker(key types.NamespacedName) *podWorker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.workers[key]
}

func (r *Runner) forget(w *podWorker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.workers[w.key] == w {
		delete(r.workers, w.key)
	}
}

// start launches a worker for pod unless the runner is shutting down.
func (r *Runner) start(pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runCtx == nil || r.runCtx.Err() != nil {
		return
	}
	w := newPodWorker(r, pod)
	r.workers[w.key] = w
	r.wg.Add(1)
	ctx := r.runCtx
	go func() {
		defer r.wg.Done()
		w.run(ctx)
		w.mu.Lock()
		stopped := w.stopped
		w.mu.Unlock()
		if stopped {
			r.forget(w)
		}
	}()
	w.log.Info("pod started")
}

// bind assigns an unbound pod to the runner's node, as a scheduler does.
func (r *Runner) bind(ctx context.Context, pod *corev1.Pod) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: r.cfg.NodeName},
	}
	if err := r.client.SubResource("binding").Create(ctx, pod, b); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // bound meanwhile, or gone
		}
		return fmt.Errorf("podrunner: bind %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// deleteNow removes a pod object whose processes have all exited.
func (r *Runner) deleteNow(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	err := r.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

// PodIP returns the address of a pod the runner has started.
func (r *Runner) PodIP(namespace, name string) (netip.Addr, bool) {
	w := r.worker(types.NamespacedName{Namespace: namespace, Name: name})
	if w == nil {
		return netip.Addr{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ip, w.ip.IsValid()
}

// SetSnapshots sets Config.Snapshots, for when the snapshot controller is
// built after the runner (it takes the runner as its Freezer). Claims
// restored from a snapshot stay Pending while no source is set.
func (r *Runner) SetSnapshots(s SnapshotSource) {
	r.volMu.Lock()
	defer r.volMu.Unlock()
	r.cfg.Snapshots = s
}

// Network returns the Docker bridge network pods run on in bridge
// container mode; false in any other mode.
func (r *Runner) Network() (BridgeNetwork, bool) {
	if r.net == nil {
		return BridgeNetwork{}, false
	}
	return *r.net, true
}

// Close removes the bridge network New created, for a Runner whose Run is
// never called (Run does it when it returns; Close after Run does
// nothing). Containers still attached keep it from being removed: call it
// only once nothing runs.
func (r *Runner) Close() error {
	var err error
	r.netRemoved.Do(func() {
		if r.net != nil && r.net.Created {
			err = removeNetwork(r.cfg.Docker.dockerCLI(), r.net)
			if err == nil {
				r.log.Info("removed bridge network", "network", r.net.Name)
			}
		}
	})
	return err
}

// hostIP is the node's address as pods see it: the host's loopback
// address, or in bridge mode the network's gateway.
func (r *Runner) hostIP() string {
	if r.net != nil {
		return r.net.Gateway.String()
	}
	return hostIP
}

// StateDir is the runner's absolute state directory.
func (r *Runner) StateDir() string { return r.cfg.StateDir }
