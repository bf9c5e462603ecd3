package csihostpath

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxNameLen bounds the names a CO may give (the CSI spec asks plugins to
// accept at least 128 bytes).
const maxNameLen = 1024

// checkCapabilities returns an InvalidArgument status unless every
// capability is a mount volume with an access mode one node can honour.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	for _, c := range caps {
		if msg := unsupported(c); msg != "" {
			return status.Error(codes.InvalidArgument, msg)
		}
	}
	return nil
}

// unsupported says why c cannot be honoured, or "" if it can.
func unsupported(c *csi.VolumeCapability) string {
	if c.GetMount() == nil {
		return "only mount volumes are supported (no block volumes)"
	}
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return ""
	default:
		return "access mode " + c.GetAccessMode().GetMode().String() + " is not supported (volumes live on one node)"
	}
}

// capacity picks the capacity of a new volume from a request's range:
// the required bytes, else DefaultCapacityBytes bounded by the limit.
func capacity(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 || (lim > 0 && lim < req) {
		return 0, status.Errorf(codes.InvalidArgument, "invalid capacity range: required %d, limit %d", req, lim)
	}
	switch {
	case req > 0:
		return req, nil
	case lim > 0 && lim < DefaultCapacityBytes:
		return lim, nil
	default:
		return DefaultCapacityBytes, nil
	}
}

// fits says whether an existing capacity satisfies a request's range.
func fits(have int64, r *csi.CapacityRange) bool {
	return have >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || have <= r.GetLimitBytes())
}

func (d *Driver) volume(m volumeMeta) *csi.Volume {
	v := &csi.Volume{VolumeId: m.ID, CapacityBytes: m.CapacityBytes}
	if m.SourceSnapshot != "" {
		v.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: m.SourceSnapshot}}}
	}
	if d.cfg.NodeID != "" {
		v.AccessibleTopology = []*csi.Topology{{Segments: map[string]string{d.TopologyKey(): d.cfg.NodeID}}}
	}
	return v
}

func snapshot(m snapshotMeta) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     m.ID,
		SourceVolumeId: m.SourceVolume,
		SizeBytes:      m.SizeBytes,
		CreationTime:   timestamppb.New(m.Created),
		ReadyToUse:     true,
	}
}

func checkName(name string) error {
	if name == "" {
		return status.Error(codes.InvalidArgument, "name missing")
	}
	if len(name) > maxNameLen {
		return status.Errorf(codes.InvalidArgument, "name longer than %d bytes", maxNameLen)
	}
	return nil
}

// CreateVolume creates an empty volume, or one holding a copy of a
// snapshot's tree when the content source is a snapshot. The volume's id
// is derived from its name: a repeated request returns the same volume,
// or ALREADY_EXISTS if the existing one does not fit the request's
// capacity or content source. Cloning from a volume is not supported.
func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if err := checkName(req.GetName()); err != nil {
		return nil, err
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	size, err := capacity(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	var source string
	if src := req.GetVolumeContentSource(); src != nil {
		snap := src.GetSnapshot()
		if snap == nil {
			return nil, status.Error(codes.InvalidArgument, "only snapshots are supported as a volume content source")
		}
		source = snap.GetSnapshotId()
		if err := checkID(snapshotPrefix, source); err != nil {
			return nil, grpcError(err)
		}
	}

	d.ctrlMu.Lock()
	defer d.ctrlMu.Unlock()
	id := nameID(volumePrefix, req.GetName())
	if m, err := d.store.getVolume(id); err == nil {
		if !fits(m.CapacityBytes, req.GetCapacityRange()) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with capacity %d", req.GetName(), m.CapacityBytes)
		}
		if m.SourceSnapshot != source {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with another content source", req.GetName())
		}
		return &csi.CreateVolumeResponse{Volume: d.volume(m)}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, grpcError(err)
	}
	if source != "" {
		snap, err := d.store.getSnapshot(source)
		if err != nil {
			return nil, grpcError(err)
		}
		if req.GetCapacityRange().GetRequiredBytes() > 0 && snap.SizeBytes > size {
			return nil, status.Errorf(codes.OutOfRange, "snapshot %s holds %d bytes, more than the %d requested", source, snap.SizeBytes, size)
		}
	}
	m := volumeMeta{ID: id, Name: req.GetName(), CapacityBytes: size, SourceSnapshot: source, Created: time.Now().UTC()}
	if err := d.store.createVolume(m); err != nil {
		return nil, grpcError(err)
	}
	d.cfg.Log.Info("volume created", "name", m.Name, "id", m.ID, "capacity", m.CapacityBytes, "snapshot", m.SourceSnapshot)
	return &csi.CreateVolumeResponse{Volume: d.volume(m)}, nil
}

// DeleteVolume deletes a volume and its tree; deleting a volume that does
// not exist succeeds. Snapshots of the volume are copies and stay.
func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	d.ctrlMu.Lock()
	defer d.ctrlMu.Unlock()
	if err := d.store.remove(volumePrefix, req.GetVolumeId()); err != nil {
		return nil, grpcError(err)
	}
	d.cfg.Log.Info("volume deleted", "id", req.GetVolumeId())
	return &csi.DeleteVolumeResponse{}, nil
}

// CreateSnapshot copies the tree of the source volume into a new snapshot,
// ready to use when the call returns. A repeated request returns the same
// snapshot, or ALREADY_EXISTS if the name is taken by a snapshot of
// another volume.
func (d *Driver) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if err := checkName(req.GetName()); err != nil {
		return nil, err
	}
	if req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "source volume id missing")
	}
	d.ctrlMu.Lock()
	defer d.ctrlMu.Unlock()
	id := nameID(snapshotPrefix, req.GetName())
	if m, err := d.store.getSnapshot(id); err == nil {
		if m.SourceVolume != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists, of volume %s", req.GetName(), m.SourceVolume)
		}
		return &csi.CreateSnapshotResponse{Snapshot: snapshot(m)}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, grpcError(err)
	}
	vol, err := d.store.getVolume(req.GetSourceVolumeId())
	if err != nil {
		return nil, grpcError(err)
	}
	m, err := d.store.createSnapshot(snapshotMeta{ID: id, Name: req.GetName(), SourceVolume: req.GetSourceVolumeId(), Created: time.Now().UTC()}, vol.CapacityBytes)
	if err != nil {
		return nil, grpcError(err)
	}
	d.cfg.Log.Info("snapshot created", "name", m.Name, "id", m.ID, "volume", m.SourceVolume, "size", m.SizeBytes, "copied", m.CopiedBytes)
	return &csi.CreateSnapshotResponse{Snapshot: snapshot(m)}, nil
}

// DeleteSnapshot deletes a snapshot; deleting one that does not exist
// succeeds. Volumes restored from it are copies and stay.
func (d *Driver) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot id missing")
	}
	d.ctrlMu.Lock()
	defer d.ctrlMu.Unlock()
	if err := d.store.remove(snapshotPrefix, req.GetSnapshotId()); err != nil {
		return nil, grpcError(err)
	}
	d.cfg.Log.Info("snapshot deleted", "id", req.GetSnapshotId())
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists snapshots in id order: one by id (none if it does not
// exist, malformed ids included), those of one source volume, or all,
// max_entries at a time; the next token is the decimal index of the next
// entry (an unusable starting token is ABORTED, as the spec asks).
func (d *Driver) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "negative max_entries")
	}
	// No lock: snapshots appear and vanish by rename, so a listing never
	// sees half of one, and a long copy does not hold it up.
	all, err := d.store.listSnapshots()
	if err != nil {
		return nil, grpcError(err)
	}
	var sel []snapshotMeta
	for _, m := range all {
		if (req.GetSnapshotId() == "" || m.ID == req.GetSnapshotId()) &&
			(req.GetSourceVolumeId() == "" || m.SourceVolume == req.GetSourceVolumeId()) {
			sel = append(sel, m)
		}
	}
	start := 0
	if t := req.GetStartingToken(); t != "" {
		start, err = strconv.Atoi(t)
		if err != nil || start < 0 || start > len(sel) {
			return nil, status.Errorf(codes.Aborted, "invalid starting token %q", t)
		}
	}
	end := len(sel)
	if n := int(req.GetMaxEntries()); n > 0 && start+n < end {
		end = start + n
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, m := range sel[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshot(m)})
	}
	if end < len(sel) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

// ControllerGetCapabilities reports volume and snapshot creation and
// deletion, snapshot listing and capacity.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	} {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

// ValidateVolumeCapabilities confirms the capabilities if every one is
// supported (a mount volume, single-node access), and otherwise says why
// not in the message; NOT_FOUND if the volume does not exist.
func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	if _, err := d.store.getVolume(req.GetVolumeId()); err != nil {
		return nil, grpcError(err)
	}
	for _, c := range req.GetVolumeCapabilities() {
		if msg := unsupported(c); msg != "" {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: msg}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// GetCapacity reports the space available to unprivileged users on the
// file system of the state directory (capacities of volumes are not
// subtracted: they are not enforced).
func (d *Driver) GetCapacity(context.Context, *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.store.root, &st); err != nil {
		return nil, grpcError(err)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: int64(st.Bavail) * st.Bsize}, nil
}
