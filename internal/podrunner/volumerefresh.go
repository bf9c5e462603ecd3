package podrunner

import (
	"context"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// DefaultVolumeRefresh is how often a running pod's Secret and ConfigMap
// volumes are compared with their objects when Config.VolumeRefresh is
// zero: a local cluster sees a rotated certificate within seconds (a
// kubelet takes up to a minute or so).
const DefaultVolumeRefresh = 2 * time.Second

// volumeRefresh returns the refresh period; zero or negative: none.
func (c *Config) volumeRefresh() time.Duration {
	switch {
	case c.VolumeRefresh == 0:
		return DefaultVolumeRefresh
	case c.VolumeRefresh < 0:
		return 0
	}
	return c.VolumeRefresh
}

// refreshVolumes keeps w's Secret and ConfigMap volumes in step with their
// objects, as a kubelet does, every Config.VolumeRefresh until ctx ends
// or every process of the pod has exited.
func (r *Runner) refreshVolumes(ctx context.Context, w *podWorker) {
	r.refreshKeyVolumes(ctx, w.pod, w.done, r.cfg.volumeRefresh())
}

// refreshKeyVolumes rewrites, every period until ctx ends or stop is
// closed, each Secret or ConfigMap volume of pod whose content changed
// (writeAtomicDir: processes see the old set or the new one). An object
// that cannot be read keeps its last content, as on a kubelet. A period
// of zero does nothing.
func (r *Runner) refreshKeyVolumes(ctx context.Context, pod *corev1.Pod, stop <-chan struct{}, period time.Duration) {
	if period <= 0 {
		return
	}
	var vols []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil || v.ConfigMap != nil {
			vols = append(vols, v)
		}
	}
	if len(vols) == 0 {
		return
	}
	base := filepath.Join(podDir(r.cfg.StateDir, pod.Namespace, pod.Name), "volumes")
	log := r.log.WithValues("pod", pod.Namespace+"/"+pod.Name)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
		}
		for _, v := range vols {
			files, err := r.keyVolumeFiles(ctx, pod.Namespace, v)
			if err != nil {
				log.V(1).Info("volume source unreadable; keeping its content", "volume", v.Name, "err", err.Error())
				continue
			}
			changed, err := WriteAtomicDir(filepath.Join(base, v.Name), files, r.now())
			if err != nil {
				log.Error(err, "refresh volume", "volume", v.Name)
				continue
			}
			if changed {
				log.Info("volume updated", "volume", v.Name)
			}
		}
	}
}
