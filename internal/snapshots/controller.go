package snapshots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"felix.dev/felix/internal/podrunner"
)

// Driver is the CSI driver name the local snapshots carry.
const Driver = "local.felix.dev"

// Finalizer keeps a VolumeSnapshot until its directory is removed.
const Finalizer = "felix.dev/local-snapshot"

// Freezer stops the processes writing to a claim for the instant of a
// copy, making the copy crash-consistent as a CSI snapshot is.
// *podrunner.Runner implements it.
type Freezer interface {
	FreezeClaim(namespace, claim string) (thaw func(), err error)
}

// Config configures a Controller.
type Config struct {
	// RestConfig reaches the API server.
	RestConfig *rest.Config
	// Namespaces limits the controller to VolumeSnapshots in these
	// namespaces; empty means every namespace.
	Namespaces []string
	// StateDir is the podrunner's state directory: claims live in
	// StateDir/pvc, snapshots go to StateDir/snapshots.
	StateDir string
	// Freezer, when set, freezes the pods using a claim while it is
	// copied; without it a copy of a live volume may be torn.
	Freezer Freezer
	// Logger receives the controller's log; default: discard.
	Logger logr.Logger
	// Now is the clock of creation times; default time.Now.
	Now func() time.Time
}

// Controller plays the CSI snapshot controller and driver for claims the
// podrunner maps to directories: a VolumeSnapshot of a claim becomes a copy
// of the claim's directory in StateDir/snapshots/<namespace>/<name>, with a
// bound VolumeSnapshotContent and status.readyToUse=true. It also serves
// that content to the podrunner (SnapshotDir) for claims restored from a
// snapshot.
type Controller struct {
	cfg    Config
	log    logr.Logger
	mgr    manager.Manager
	client client.Client
	reader client.Reader
}

// Scheme returns a scheme with the core kinds and the snapshot kinds.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := snapv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// New builds a Controller; the snapshot CRDs must be installed (see
// InstallCRDs) before Run.
func New(cfg Config) (*Controller, error) {
	if cfg.RestConfig == nil || cfg.StateDir == "" {
		return nil, errors.New("snapshots: Config.RestConfig and Config.StateDir are required")
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	cfg.StateDir = abs
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = logr.Discard()
	}
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	opts := ctrl.Options{
		Scheme:                 s,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 cfg.Logger,
	}
	if len(cfg.Namespaces) > 0 {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.Namespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(cfg.RestConfig, opts)
	if err != nil {
		return nil, fmt.Errorf("snapshots: manager: %w", err)
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, mgr: mgr, client: mgr.GetClient(), reader: mgr.GetAPIReader()}
	err = ctrl.NewControllerManagedBy(mgr).Named("local-snapshots").For(&snapv1.VolumeSnapshot{}).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(reconcile.Func(c.reconcile))
	if err != nil {
		return nil, fmt.Errorf("snapshots: controller: %w", err)
	}
	return c, nil
}

// SetFreezer sets Config.Freezer; call it before Run. It breaks the
// construction cycle with the podrunner, which takes the Controller as its
// SnapshotSource and is the Freezer.
func (c *Controller) SetFreezer(f Freezer) { c.cfg.Freezer = f }

// Run runs the controller until ctx ends.
func (c *Controller) Run(ctx context.Context) error { return c.mgr.Start(ctx) }

// SnapshotDir is where the content of VolumeSnapshot namespace/name is
// kept under stateDir: stateDir/snapshots/<namespace>/<name>.
func SnapshotDir(stateDir, namespace, name string) string {
	return filepath.Join(stateDir, "snapshots", namespace, name)
}

func snapshotUIDFile(stateDir, namespace, name string) string {
	return filepath.Join(stateDir, "snapshots", namespace, "."+name+".uid")
}

// contentName is the VolumeSnapshotContent bound to a snapshot, named as
// the CSI snapshot controller names them.
func contentName(uid types.UID) string { return "snapcontent-" + string(uid) }

// SnapshotDir returns the content directory of a ready VolumeSnapshot; it
// implements podrunner.SnapshotSource. While the snapshot is missing or
// not ready the error wraps podrunner.ErrSnapshotNotReady.
func (c *Controller) SnapshotDir(ctx context.Context, namespace, name string) (string, error) {
	var vs snapv1.VolumeSnapshot
	if err := c.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &vs); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("%w: %s/%s does not exist", podrunner.ErrSnapshotNotReady, namespace, name)
		}
		return "", err
	}
	if vs.Status == nil || vs.Status.ReadyToUse == nil || !*vs.Status.ReadyToUse || vs.DeletionTimestamp != nil {
		return "", fmt.Errorf("%w: %s/%s", podrunner.ErrSnapshotNotReady, namespace, name)
	}
	if !c.ownsDir(&vs) {
		return "", fmt.Errorf("%w: %s/%s has no local content", podrunner.ErrSnapshotNotReady, namespace, name)
	}
	return SnapshotDir(c.cfg.StateDir, namespace, name), nil
}

// ownsDir reports whether the snapshot directory was made for vs (and not
// for an earlier snapshot of the same name).
func (c *Controller) ownsDir(vs *snapv1.VolumeSnapshot) bool {
	b, err := os.ReadFile(snapshotUIDFile(c.cfg.StateDir, vs.Namespace, vs.Name))
	if err != nil || !bytes.Equal(b, []byte(vs.UID)) {
		return false
	}
	_, err = os.Stat(SnapshotDir(c.cfg.StateDir, vs.Namespace, vs.Name))
	return err == nil
}

func (c *Controller) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var vs snapv1.VolumeSnapshot
	if err := c.client.Get(ctx, req.NamespacedName, &vs); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if vs.DeletionTimestamp != nil {
		return reconcile.Result{}, c.remove(ctx, &vs)
	}
	if controllerutil.AddFinalizer(&vs, Finalizer) {
		if err := c.client.Update(ctx, &vs); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if vs.Status != nil && vs.Status.ReadyToUse != nil && *vs.Status.ReadyToUse {
		return reconcile.Result{}, nil
	}
	claim := ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "")
	if claim == "" {
		return reconcile.Result{}, c.fail(ctx, &vs, "only snapshots of a persistentVolumeClaimName are supported locally")
	}
	var pvc corev1.PersistentVolumeClaim
	err := c.reader.Get(ctx, types.NamespacedName{Namespace: vs.Namespace, Name: claim}, &pvc)
	if err != nil || pvc.Status.Phase != corev1.ClaimBound {
		msg := fmt.Sprintf("waiting for claim %s to be bound", claim)
		if err != nil {
			msg = fmt.Sprintf("claim %s: %v", claim, err)
		}
		if ferr := c.fail(ctx, &vs, msg); ferr != nil {
			return reconcile.Result{}, ferr
		}
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	size, err := c.copyClaim(&vs, claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	created := c.cfg.Now()
	if err := c.bindContent(ctx, &vs, claim, size, created); err != nil {
		return reconcile.Result{}, err
	}
	vs.Status = &snapv1.VolumeSnapshotStatus{
		BoundVolumeSnapshotContentName: ptr.To(contentName(vs.UID)),
		CreationTime:                   ptr.To(metav1.NewTime(created)),
		ReadyToUse:                     ptr.To(true),
		RestoreSize:                    resource.NewQuantity(size, resource.BinarySI),
	}
	if err := c.client.Status().Update(ctx, &vs); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	c.log.Info("snapshot ready", "snapshot", req.String(), "claim", claim, "bytes", size)
	return reconcile.Result{}, nil
}

// copyClaim copies the claim's directory into the snapshot's, with the
// claim's pods frozen meanwhile. A directory already made for this
// snapshot is kept (a status write failed after the copy).
func (c *Controller) copyClaim(vs *snapv1.VolumeSnapshot, claim string) (int64, error) {
	dst := SnapshotDir(c.cfg.StateDir, vs.Namespace, vs.Name)
	if c.ownsDir(vs) {
		return dirSize(dst)
	}
	if err := os.RemoveAll(dst); err != nil {
		return 0, err
	}
	thaw := func() {}
	if c.cfg.Freezer != nil {
		t, err := c.cfg.Freezer.FreezeClaim(vs.Namespace, claim)
		if err != nil {
			return 0, err
		}
		thaw = t
	}
	n, err := podrunner.CopyDir(podrunner.ClaimDir(c.cfg.StateDir, vs.Namespace, claim), dst)
	thaw()
	if err != nil {
		return 0, fmt.Errorf("snapshots: %s/%s: %w", vs.Namespace, vs.Name, err)
	}
	if err := os.WriteFile(snapshotUIDFile(c.cfg.StateDir, vs.Namespace, vs.Name), []byte(vs.UID), 0o644); err != nil {
		return 0, err
	}
	return n, nil
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// bindContent creates the VolumeSnapshotContent a CSI snapshot controller
// would, bound to vs and ready.
func (c *Controller) bindContent(ctx context.Context, vs *snapv1.VolumeSnapshot, claim string, size int64, created time.Time) error {
	dir := SnapshotDir(c.cfg.StateDir, vs.Namespace, vs.Name)
	content := &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName(vs.UID)},
		Spec: snapv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{
				APIVersion: snapv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshot",
				Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID,
			},
			DeletionPolicy:          snapv1.VolumeSnapshotContentDelete,
			Driver:                  Driver,
			VolumeSnapshotClassName: vs.Spec.VolumeSnapshotClassName,
			Source:                  snapv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(podrunner.ClaimDir(c.cfg.StateDir, vs.Namespace, claim))},
		},
	}
	if err := c.client.Create(ctx, content); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("snapshots: content for %s/%s: %w", vs.Namespace, vs.Name, err)
		}
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(content), content); err != nil {
			return err
		}
	}
	content.Status = &snapv1.VolumeSnapshotContentStatus{
		SnapshotHandle: ptr.To(dir),
		CreationTime:   ptr.To(created.UnixNano()),
		RestoreSize:    ptr.To(size),
		ReadyToUse:     ptr.To(true),
	}
	if err := c.client.Status().Update(ctx, content); err != nil {
		return fmt.Errorf("snapshots: content status for %s/%s: %w", vs.Namespace, vs.Name, err)
	}
	return nil
}

// fail records why a snapshot is not ready yet in status.error.
func (c *Controller) fail(ctx context.Context, vs *snapv1.VolumeSnapshot, msg string) error {
	if vs.Status != nil && vs.Status.Error != nil && ptr.Deref(vs.Status.Error.Message, "") == msg {
		return nil
	}
	if vs.Status == nil {
		vs.Status = &snapv1.VolumeSnapshotStatus{}
	}
	vs.Status.ReadyToUse = ptr.To(false)
	vs.Status.Error = &snapv1.VolumeSnapshotError{Time: ptr.To(metav1.NewTime(c.cfg.Now())), Message: ptr.To(msg)}
	return client.IgnoreNotFound(c.client.Status().Update(ctx, vs))
}

// remove deletes a deleted snapshot's directory and content object
// (deletionPolicy Delete), then releases it.
func (c *Controller) remove(ctx context.Context, vs *snapv1.VolumeSnapshot) error {
	if !controllerutil.ContainsFinalizer(vs, Finalizer) {
		return nil
	}
	if c.ownsDir(vs) {
		if err := os.RemoveAll(SnapshotDir(c.cfg.StateDir, vs.Namespace, vs.Name)); err != nil {
			return err
		}
		if err := os.Remove(snapshotUIDFile(c.cfg.StateDir, vs.Namespace, vs.Name)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	content := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: contentName(vs.UID)}}
	if err := c.client.Delete(ctx, content); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	controllerutil.RemoveFinalizer(vs, Finalizer)
	return client.IgnoreNotFound(c.client.Update(ctx, vs))
}
