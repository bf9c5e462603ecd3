package csihostpath

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Mounter does the mounts of the Node service.
type Mounter interface {
	// BindMount mounts the directory source at the existing directory
	// target, read-only if readOnly.
	BindMount(source, target string, readOnly bool) error
	// Unmount unmounts target.
	Unmount(target string) error
	// MountPoint says whether target is a mount point and, if so, whether
	// it is mounted read-only.
	MountPoint(target string) (mounted, readOnly bool, err error)
}

// SystemMounter is the Mounter of mount(2), umount(2) and
// /proc/self/mountinfo. It needs CAP_SYS_ADMIN.
type SystemMounter struct{}

// BindMount implements Mounter: a bind mount, then a read-only remount of
// it if readOnly (a bind mount ignores MS_RDONLY on creation). The mount
// is not recursive: mounts below source stay out of the pod.
func (SystemMounter) BindMount(source, target string, readOnly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return &os.PathError{Op: "bind mount", Path: target, Err: err}
	}
	if readOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return &os.PathError{Op: "read-only remount", Path: target, Err: err}
		}
	}
	return nil
}

// Unmount implements Mounter.
func (SystemMounter) Unmount(target string) error {
	if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil {
		return &os.PathError{Op: "unmount", Path: target, Err: err}
	}
	return nil
}

// MountPoint implements Mounter by reading /proc/self/mountinfo (the last
// mount on target is the visible one).
func (SystemMounter) MountPoint(target string) (bool, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	mounted, ro := false, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || unescapeMountinfo(fields[4]) != target {
			continue
		}
		mounted = true
		ro = false
		for _, o := range strings.Split(fields[5], ",") {
			if o == "ro" {
				ro = true
			}
		}
	}
	return mounted, ro, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for a space...) of
// /proc/self/mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkTarget returns an InvalidArgument status unless target is a clean
// absolute path, inside the kubelet's directory when one is configured.
func (d *Driver) checkTarget(target string) error {
	if target == "" {
		return status.Error(codes.InvalidArgument, "target path missing")
	}
	if !filepath.IsAbs(target) || filepath.Clean(target) != target {
		return status.Errorf(codes.InvalidArgument, "target path %q is not a clean absolute path", target)
	}
	if k := d.cfg.KubeletDir; k != "" && !strings.HasPrefix(target, k+string(filepath.Separator)) {
		return status.Errorf(codes.InvalidArgument, "target path %q is outside the kubelet directory %s", target, k)
	}
	return nil
}

// NodePublishVolume bind mounts the volume's directory at the target path
// (created if missing), read-only if the request says so. Publishing again
// at the same target with the same read-only setting succeeds;
// ALREADY_EXISTS if the target is mounted with the other setting.
func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if err := d.checkTarget(target); err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume capability missing")
	}
	if msg := unsupported(req.GetVolumeCapability()); msg != "" {
		return nil, status.Error(codes.InvalidArgument, msg)
	}
	readOnly := req.GetReadonly() ||
		req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	if _, err := d.store.getVolume(id); err != nil {
		return nil, grpcError(err)
	}

	d.nodeMu.Lock()
	defer d.nodeMu.Unlock()
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, grpcError(fmt.Errorf("creating target: %w", err))
	}
	mounted, ro, err := d.cfg.Mounter.MountPoint(target)
	if err != nil {
		return nil, grpcError(err)
	}
	if mounted {
		if ro != readOnly {
			return nil, status.Errorf(codes.AlreadyExists, "%s is mounted with read-only %v", target, ro)
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := d.cfg.Mounter.BindMount(d.store.volumeDataDir(id), target, readOnly); err != nil {
		return nil, grpcError(err)
	}
	d.cfg.Log.Info("volume published", "id", id, "target", target, "readOnly", readOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

// maxStackedMounts bounds the unmounts NodeUnpublishVolume does on one target.
const maxStackedMounts = 16

// NodeUnpublishVolume unmounts the target path and removes it; a target
// that is not mounted or does not exist is no error. NOT_FOUND if the
// volume does not exist and there is nothing at the target; a target left
// behind by a volume deleted since is still cleaned up (the kubelet would
// retry it forever otherwise).
func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if err := d.checkTarget(target); err != nil {
		return nil, err
	}
	d.nodeMu.Lock()
	defer d.nodeMu.Unlock()
	if _, err := d.store.getVolume(id); err != nil {
		if !errors.Is(err, ErrNotFound) {
			return nil, grpcError(err)
		}
		if _, serr := os.Lstat(target); errors.Is(serr, fs.ErrNotExist) {
			return nil, grpcError(err)
		}
	}
	// A target may carry stacked mounts (a publish repeated after a crash
	// between mount and reply, by an older plugin); unmount them all.
	for i := 0; ; i++ {
		mounted, _, err := d.cfg.Mounter.MountPoint(target)
		if err != nil {
			return nil, grpcError(err)
		}
		if !mounted {
			break
		}
		if i == maxStackedMounts {
			return nil, status.Errorf(codes.Internal, "%s is still mounted after %d unmounts", target, i)
		}
		if err := d.cfg.Mounter.Unmount(target); err != nil {
			return nil, grpcError(err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, grpcError(fmt.Errorf("removing target: %w", err))
	}
	d.cfg.Log.Info("volume unpublished", "id", id, "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetInfo returns the node id and the node's topology segment.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	if d.cfg.NodeID == "" {
		return nil, status.Error(codes.FailedPrecondition, "the driver was started without a node id")
	}
	return &csi.NodeGetInfoResponse{
		NodeId:             d.cfg.NodeID,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{d.TopologyKey(): d.cfg.NodeID}},
	}, nil
}

// NodeGetCapabilities reports no optional node capability: there is no
// staging step and no volume statistics.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}
