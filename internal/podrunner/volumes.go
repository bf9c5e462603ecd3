package podrunner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// snapshotAPIGroup is the API group of VolumeSnapshot data sources.
const snapshotAPIGroup = "snapshot.storage.k8s.io"

// errVolume marks a volume that cannot be set up yet (claim missing,
// snapshot not ready); the pod stays Pending and the runner retries.
var errVolume = errors.New("volume not ready")

func claimUIDFile(stateDir, namespace, claim string) string {
	return filepath.Join(stateDir, "pvc", namespace, "."+claim+".uid")
}

// snapshotSourceOf returns the VolumeSnapshot a claim is to start as a copy
// of, or "" when it starts empty.
func snapshotSourceOf(pvc *corev1.PersistentVolumeClaim) string {
	if ref := pvc.Spec.DataSourceRef; ref != nil && ref.APIGroup != nil && *ref.APIGroup == snapshotAPIGroup && ref.Kind == "VolumeSnapshot" {
		return ref.Name
	}
	if ref := pvc.Spec.DataSource; ref != nil && ref.APIGroup != nil && *ref.APIGroup == snapshotAPIGroup && ref.Kind == "VolumeSnapshot" {
		return ref.Name
	}
	return ""
}

// provisionClaim makes sure the directory of pvc exists and belongs to it
// and returns it. A directory left by an earlier claim of the same name
// (another UID, e.g. from an earlier API server) is replaced. A new claim
// whose dataSource is a VolumeSnapshot starts as a copy of its content.
func (r *Runner) provisionClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, error) {
	r.volMu.Lock()
	defer r.volMu.Unlock()
	dir := ClaimDir(r.cfg.StateDir, pvc.Namespace, pvc.Name)
	uidFile := claimUIDFile(r.cfg.StateDir, pvc.Namespace, pvc.Name)
	owner, err := os.ReadFile(uidFile)
	ownerKnown := err == nil
	power := r.powerLossClaim(pvc.Namespace)
	backing := powerBackingDir(r.cfg.StateDir, pvc.Namespace, pvc.Name)
	if _, err := os.Stat(dir); err == nil {
		if !ownerKnown || bytes.Equal(owner, []byte(pvc.UID)) {
			if !ownerKnown {
				if err := os.WriteFile(uidFile, []byte(pvc.UID), 0o644); err != nil {
					return "", err
				}
			}
			if power {
				if err := r.mountPowerClaim(pvc.Namespace, pvc.Name); err != nil {
					return "", err
				}
			}
			return dir, nil
		}
		r.log.Info("replacing the directory of an earlier claim", "claim", pvc.Namespace+"/"+pvc.Name)
		if err := r.unmountPowerClaim(pvc.Namespace, pvc.Name); err != nil {
			return "", err
		}
		if err := os.RemoveAll(dir); err != nil {
			return "", err
		}
		if err := os.RemoveAll(backing); err != nil {
			return "", err
		}
	}
	// A power-loss claim's content goes to its backing directory (durable
	// from the start), mounted on dir below.
	content := dir
	if power {
		content = backing
	}
	if snap := snapshotSourceOf(pvc); snap != "" {
		if r.cfg.Snapshots == nil {
			return "", fmt.Errorf("%w: claim %s/%s restores snapshot %s and the runner has no snapshot source", errVolume, pvc.Namespace, pvc.Name, snap)
		}
		src, err := r.cfg.Snapshots.SnapshotDir(ctx, pvc.Namespace, snap)
		if err != nil {
			return "", fmt.Errorf("%w: claim %s/%s: %w", errVolume, pvc.Namespace, pvc.Name, err)
		}
		n, err := CopyDir(src, content)
		if err != nil {
			return "", err
		}
		r.log.Info("claim restored from snapshot", "claim", pvc.Namespace+"/"+pvc.Name, "snapshot", snap, "bytes", n)
	} else if err := os.MkdirAll(content, 0o755); err != nil {
		return "", err
	}
	if power {
		if err := r.mountPowerClaim(pvc.Namespace, pvc.Name); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(uidFile, []byte(pvc.UID), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// removeClaimDir deletes the directory of a deleted claim (reclaim policy
// Delete) if it still belongs to uid.
func (r *Runner) removeClaimDir(namespace, claim string, uid types.UID) error {
	r.volMu.Lock()
	defer r.volMu.Unlock()
	uidFile := claimUIDFile(r.cfg.StateDir, namespace, claim)
	owner, err := os.ReadFile(uidFile)
	if err != nil || !bytes.Equal(owner, []byte(uid)) {
		return nil
	}
	if err := r.unmountPowerClaim(namespace, claim); err != nil {
		return err
	}
	if err := os.RemoveAll(ClaimDir(r.cfg.StateDir, namespace, claim)); err != nil {
		return err
	}
	if err := os.RemoveAll(powerBackingDir(r.cfg.StateDir, namespace, claim)); err != nil {
		return err
	}
	return os.Remove(uidFile)
}

// podVolumes sets up the volumes of pod and returns the host directory of
// each by volume name.
func (r *Runner) podVolumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	dirs := map[string]string{}
	base := filepath.Join(podDir(r.cfg.StateDir, pod.Namespace, pod.Name), "volumes")
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			var pvc corev1.PersistentVolumeClaim
			key := types.NamespacedName{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}
			if err := r.reader.Get(ctx, key, &pvc); err != nil {
				return nil, fmt.Errorf("%w: claim %s: %w", errVolume, key, err)
			}
			if pvc.DeletionTimestamp != nil {
				return nil, fmt.Errorf("%w: claim %s is being deleted", errVolume, key)
			}
			dir, err := r.provisionClaim(ctx, &pvc)
			if err != nil {
				return nil, err
			}
			dirs[v.Name] = dir
		case v.EmptyDir != nil:
			dir := filepath.Join(base, v.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			dirs[v.Name] = dir
		case v.HostPath != nil:
			dirs[v.Name] = v.HostPath.Path
		case v.ConfigMap != nil || v.Secret != nil:
			files, err := r.keyVolumeFiles(ctx, pod.Namespace, v)
			if err != nil {
				return nil, err
			}
			dir := filepath.Join(base, v.Name)
			// A fresh start: whatever an earlier run of the pod left
			// (another layout, other keys) goes.
			if err := os.RemoveAll(dir); err != nil {
				return nil, err
			}
			if _, err := WriteAtomicDir(dir, files, r.now()); err != nil {
				return nil, err
			}
			dirs[v.Name] = dir
		default:
			return nil, fmt.Errorf("%w: volume %s: unsupported volume type (pvc, emptyDir, hostPath, configMap, secret)", errConfig, v.Name)
		}
	}
	return dirs, nil
}

// keyVolumeFiles reads the ConfigMap or Secret of volume v and returns
// the files it projects (all keys, or only its items, by path). A missing
// optional object projects nothing; a missing required one is errVolume.
func (r *Runner) keyVolumeFiles(ctx context.Context, namespace string, v corev1.Volume) (map[string][]byte, error) {
	data := map[string][]byte{}
	var items []corev1.KeyToPath
	switch {
	case v.ConfigMap != nil:
		var cm corev1.ConfigMap
		err := r.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: v.ConfigMap.Name}, &cm)
		if err != nil && !optional(v.ConfigMap.Optional) {
			return nil, fmt.Errorf("%w: configmap %s: %w", errVolume, v.ConfigMap.Name, err)
		}
		for k, s := range cm.Data {
			data[k] = []byte(s)
		}
		for k, b := range cm.BinaryData {
			data[k] = b
		}
		items = v.ConfigMap.Items
	case v.Secret != nil:
		var s corev1.Secret
		err := r.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: v.Secret.SecretName}, &s)
		if err != nil && !optional(v.Secret.Optional) {
			return nil, fmt.Errorf("%w: secret %s: %w", errVolume, v.Secret.SecretName, err)
		}
		data = s.Data
		items = v.Secret.Items
	default:
		return nil, fmt.Errorf("%w: volume %s is neither a configMap nor a secret", errConfig, v.Name)
	}
	if len(items) == 0 {
		return data, nil
	}
	files := make(map[string][]byte, len(items))
	for _, it := range items {
		if b, ok := data[it.Key]; ok {
			files[it.Path] = b
		}
	}
	return files, nil
}

// containerMounts maps a container's volume mounts to host directories.
func containerMounts(c *corev1.Container, dirs map[string]string) ([]Mount, error) {
	var out []Mount
	for _, m := range c.VolumeMounts {
		dir, ok := dirs[m.Name]
		if !ok {
			return nil, fmt.Errorf("%w: mount %s: no volume %q", errConfig, m.MountPath, m.Name)
		}
		if m.SubPath != "" {
			dir = filepath.Join(dir, filepath.Clean("/"+m.SubPath))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
		}
		out = append(out, Mount{ContainerPath: m.MountPath, HostPath: dir})
	}
	return out, nil
}
