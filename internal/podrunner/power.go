package podrunner

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"felix.dev/felix/internal/powerfs"
)

// ErrNoPowerLoss is returned by PowerCut for a pod none of whose claims is
// on a power-loss file system (Config.PowerLoss unset, or the pod's
// namespace not in PowerLossConfig.Namespaces).
var ErrNoPowerLoss = errors.New("podrunner: pod has no power-loss claim")

// PowerLossConfig puts claims on power-loss file systems (internal/powerfs)
// so a test can cut the power of a pod's machine with Runner.PowerCut.
//
// Such a claim's directory (ClaimDir) is a powerfs mount over a backing
// directory beside it, pvc/<namespace>/.<claim>.durable, which holds only
// what was made durable (fsync, fdatasync, directory fsync) once the
// mount is cut. The runner mounts it when it provisions the claim and
// unmounts it cleanly (keeping everything) when the claim is deleted and
// when Run returns. FUSE must be available (/dev/fuse, fusermount3, root);
// a claim that cannot be mounted stays unprovisioned and its pods Pending.
// Container mode is not supported (a FUSE mount bind-mounted into a
// container keeps the mount busy after the container is killed).
type PowerLossConfig struct {
	// Namespaces limits power-loss claims to these namespaces; empty:
	// every claim.
	Namespaces []string
	// BootIDFlag, when set, is the flag through which a container's
	// binary is told its boot id file (felix broker: "--boot-id-file").
	// Every main container of a pod with a power-loss claim gets
	// "BootIDFlag <pod dir>/boot_id" appended to its arguments; the file
	// holds a random lowercase UUID, replaced at every power cut of the
	// pod, as the kernel's boot id changes at every boot.
	BootIDFlag string
	// Tear, when set, tears the last unsynced write of each file at a
	// power cut (a random prefix of its pages survives).
	Tear bool
	// StrictPOSIX, when set, makes only a directory's own fsync make its
	// entries durable. Unset, any file's fsync makes every directory
	// change so far durable, as ext4 and xfs do (powerfs
	// JournaledMetadata). badger does not fsync its directory after a
	// memtable flush creates a table, so under strict POSIX a power cut
	// can leave a manifest naming a table whose name was lost.
	StrictPOSIX bool
	// Seed seeds the boot ids and the tearing.
	Seed uint64
}

// powerClaim is one mounted power-loss claim.
type powerClaim struct {
	fs      *powerfs.FS
	backing string
}

// powerBackingDir is the backing directory of a power-loss claim.
func powerBackingDir(stateDir, namespace, claim string) string {
	return filepath.Join(stateDir, "pvc", namespace, "."+claim+".durable")
}

// powerLossClaim reports whether claims of namespace go on powerfs.
func (r *Runner) powerLossClaim(namespace string) bool {
	pl := r.cfg.PowerLoss
	return pl != nil && (len(pl.Namespaces) == 0 || slices.Contains(pl.Namespaces, namespace))
}

// mountPowerClaim mounts the power-loss file system of claim
// namespace/claim on its directory, if it is not mounted yet. A plain
// directory left there (an earlier runner without power loss) becomes
// the backing directory. Called with volMu held.
func (r *Runner) mountPowerClaim(namespace, claim string) error {
	key := namespace + "/" + claim
	if _, ok := r.power[key]; ok {
		return nil
	}
	dir := ClaimDir(r.cfg.StateDir, namespace, claim)
	backing := powerBackingDir(r.cfg.StateDir, namespace, claim)
	if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(dir); err == nil {
			if err := os.Rename(dir, backing); err != nil {
				return fmt.Errorf("podrunner: power-loss claim %s: %w", key, err)
			}
		} else if err := os.MkdirAll(backing, 0o755); err != nil {
			return fmt.Errorf("podrunner: power-loss claim %s: %w", key, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("podrunner: power-loss claim %s: %w", key, err)
	}
	f, err := r.mountPower(dir, backing)
	if err != nil {
		return fmt.Errorf("%w: power-loss claim %s: %w", errVolume, key, err)
	}
	r.power[key] = &powerClaim{fs: f, backing: backing}
	r.log.Info("power-loss claim mounted", "claim", key, "backing", backing)
	return nil
}

// mountPower mounts a powerfs on dir over backing. Called with volMu held.
func (r *Runner) mountPower(dir, backing string) (*powerfs.FS, error) {
	opts := powerfs.Options{Backing: backing, JournaledMetadata: !r.cfg.PowerLoss.StrictPOSIX,
		Logger: r.log.WithName("powerfs").WithValues("dir", dir)}
	if r.cfg.PowerLoss.Tear {
		opts.Rand = rand.New(rand.NewPCG(r.powerRand.Uint64(), r.powerRand.Uint64()))
	}
	return powerfs.Mount(dir, opts)
}

// unmountPowerClaim unmounts a power-loss claim cleanly (everything
// written is kept) and forgets it; nothing to do for a claim that is not
// mounted. Called with volMu held.
func (r *Runner) unmountPowerClaim(namespace, claim string) error {
	key := namespace + "/" + claim
	pc, ok := r.power[key]
	if !ok {
		return nil
	}
	if err := pc.fs.Unmount(); err != nil && !errors.Is(err, powerfs.ErrNotMounted) {
		return fmt.Errorf("podrunner: unmount power-loss claim %s: %w", key, err)
	}
	delete(r.power, key)
	return nil
}

// unmountAllPower unmounts every power-loss claim cleanly; Run calls it
// once every process has exited.
func (r *Runner) unmountAllPower() error {
	r.volMu.Lock()
	defer r.volMu.Unlock()
	var errs []error
	for key, pc := range r.power {
		if err := unmountRetrying(pc.fs); err != nil && !errors.Is(err, powerfs.ErrNotMounted) {
			errs = append(errs, fmt.Errorf("podrunner: unmount power-loss claim %s: %w", key, err))
			continue
		}
		delete(r.power, key)
	}
	return errors.Join(errs...)
}

// unmountRetrying unmounts f, retrying for a few seconds while the mount
// is busy (a process that just exited may still hold it for a moment).
func unmountRetrying(f *powerfs.FS) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := f.Unmount()
		if err == nil || errors.Is(err, powerfs.ErrNotMounted) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newBootID returns a random lowercase UUID (version 4 layout). Called
// with volMu held.
func (r *Runner) newBootID() string {
	hi, lo := r.powerRand.Uint64(), r.powerRand.Uint64()
	hi = hi&^0xf000 | 0x4000     // version 4
	lo = lo&^(0xc<<60) | 0x8<<60 // variant 10
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, hi>>16&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}

// bootIDFile is the boot id file of pod namespace/name.
func bootIDFile(stateDir, namespace, name string) string {
	return filepath.Join(podDir(stateDir, namespace, name), "boot_id")
}

// onPower reports whether the pod mounts a power-loss claim.
func (w *podWorker) onPower() bool {
	if !w.r.powerLossClaim(w.key.Namespace) {
		return false
	}
	for _, v := range w.pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return true
		}
	}
	return false
}

// syncPowerClaims makes everything written to the pod's power-loss
// claims durable, standing for the syncfs(2) a program starting on the
// same boot may rely on: FUSE never sees syncfs, so without this a write
// the page cache held across a kill -9 and that the restarted program's
// syncfs made durable would still be lost at a later power cut (the felix
// broker calls syncfs at every start and keeps its storage id on it).
// Nothing runs on the claims between the previous process's exit and the
// new start, so syncing now is what that syncfs would do. Called before
// every container start, with powerMu held.
func (w *podWorker) syncPowerClaims() {
	if !w.r.powerLossClaim(w.key.Namespace) {
		return
	}
	w.r.volMu.Lock()
	defer w.r.volMu.Unlock()
	for _, v := range w.pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		if pc, ok := w.r.power[w.key.Namespace+"/"+v.PersistentVolumeClaim.ClaimName]; ok {
			pc.fs.SyncAll()
		}
	}
}

// ensureBootID writes the pod's boot id file if it does not exist yet.
func (w *podWorker) ensureBootID() error {
	path := bootIDFile(w.r.cfg.StateDir, w.key.Namespace, w.key.Name)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	w.r.volMu.Lock()
	id := w.r.newBootID()
	w.r.volMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(id+"\n"), 0o644)
}

// PowerCut cuts the power of pod namespace/name's machine: every main
// container process of the pod gets SIGKILL, and once they have exited
// each of the pod's power-loss claims loses everything not made durable
// (powerfs PowerCut: unsynced data, truncations and directory changes;
// with PowerLossConfig.Tear the last unsynced write of each file torn at
// a page) and is mounted again over what was durable. The pod's boot id
// changes, as after a reboot. Only then may the runner restart the
// containers (per restartPolicy, counting restarts, as after Kill): a
// start due meanwhile waits for the power cut to finish.
//
// Every container start on a power-loss claim first makes the claim
// durable (see syncPowerClaims: FUSE does not see syncfs(2)), so a power
// cut loses only what was written since the pod's current process
// started and was not synced by it.
//
// It returns what the claims lost, an error wrapping ErrPodNotRunning when
// the pod has no running container, or ErrNoPowerLoss when none of its
// claims is on powerfs (nothing is killed then).
func (r *Runner) PowerCut(namespace, name string) (powerfs.Loss, error) {
	w := r.worker(types.NamespacedName{Namespace: namespace, Name: name})
	if w == nil {
		return powerfs.Loss{}, fmt.Errorf("%w: %s/%s", ErrPodNotRunning, namespace, name)
	}
	var claims []string
	r.volMu.Lock()
	for _, v := range w.pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		if _, ok := r.power[namespace+"/"+v.PersistentVolumeClaim.ClaimName]; ok {
			claims = append(claims, v.PersistentVolumeClaim.ClaimName)
		}
	}
	r.volMu.Unlock()
	if len(claims) == 0 {
		return powerfs.Loss{}, fmt.Errorf("%w: %s/%s", ErrNoPowerLoss, namespace, name)
	}
	// Hold every container start until the claims are mounted again.
	w.powerMu.Lock()
	defer w.powerMu.Unlock()
	var procs []*process
	ok, err := w.signalContainers(func(cs *containerState) error {
		if err := cs.proc.signal(syscall.SIGKILL); err != nil {
			return err
		}
		procs = append(procs, cs.proc)
		return nil
	})
	if err != nil {
		return powerfs.Loss{}, fmt.Errorf("podrunner: power cut %s/%s: %w", namespace, name, err)
	}
	if !ok {
		return powerfs.Loss{}, fmt.Errorf("%w: %s/%s", ErrPodNotRunning, namespace, name)
	}
	for _, p := range procs {
		<-p.done
	}
	r.volMu.Lock()
	defer r.volMu.Unlock()
	var total powerfs.Loss
	for _, claim := range claims {
		key := namespace + "/" + claim
		pc := r.power[key]
		loss, err := powerCutRetrying(pc.fs)
		if err != nil {
			return total, fmt.Errorf("podrunner: power cut %s: %w", key, err)
		}
		total.Files += loss.Files
		total.Pages += loss.Pages
		total.TornPages += loss.TornPages
		total.Entries += loss.Entries
		f, err := r.mountPower(ClaimDir(r.cfg.StateDir, namespace, claim), pc.backing)
		if err != nil {
			delete(r.power, key)
			return total, fmt.Errorf("podrunner: remount %s after the power cut: %w", key, err)
		}
		pc.fs = f
	}
	boot := bootIDFile(r.cfg.StateDir, namespace, name)
	if err := os.MkdirAll(filepath.Dir(boot), 0o755); err != nil {
		return total, err
	}
	if err := os.WriteFile(boot, []byte(r.newBootID()+"\n"), 0o644); err != nil {
		return total, fmt.Errorf("podrunner: power cut %s/%s: new boot id: %w", namespace, name, err)
	}
	w.log.Info("power cut", "claims", claims, "files", total.Files, "pages", total.Pages,
		"tornPages", total.TornPages, "entries", total.Entries)
	return total, nil
}

// powerCutRetrying cuts the power of f, retrying for a few seconds while
// the mount is busy (the kernel may hold it for a moment after the last
// process using it was reaped). A failed unmount leaves f mounted and
// untouched, so retrying is safe.
func powerCutRetrying(f *powerfs.FS) (powerfs.Loss, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		loss, err := f.PowerCut()
		if err == nil || errors.Is(err, powerfs.ErrNotMounted) || time.Now().After(deadline) {
			return loss, err
		}
		if f.Mounted() {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		return loss, err // unmounted and rolled back, with undo errors
	}
}
