package csihostpath

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// harness is a driver serving all its services on a unix socket in a
// temporary directory, and clients connected to it.
type harness struct {
	d          *Driver
	kubeletDir string
	id         csi.IdentityClient
	ctrl       csi.ControllerClient
	node       csi.NodeClient
}

// serve starts srv on a unix socket in dir and returns a connection to it;
// both are closed when the test ends.
func serve(t *testing.T, dir string, register func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	t.Helper()
	sock := filepath.Join(dir, "s.sock")
	lis, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(LoggingInterceptor(testr.New(t))))
	register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-done
	})
	return conn
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	base := t.TempDir()
	kubelet := filepath.Join(base, "kubelet")
	if err := os.Mkdir(kubelet, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{
		Version:    "test",
		StateDir:   filepath.Join(base, "state"),
		NodeID:     "node-1",
		KubeletDir: kubelet,
		Log:        testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, base, func(s grpc.ServiceRegistrar) { d.Register(s, Services{Controller: true, Node: true}) })
	return &harness{
		d: d, kubeletDir: kubelet,
		id: csi.NewIdentityClient(conn), ctrl: csi.NewControllerClient(conn), node: csi.NewNodeClient(conn),
	}
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func rwo() *csi.VolumeCapability { return mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER) }

func (h *harness) createVolume(t *testing.T, name string, size int64, snapshotID string) *csi.Volume {
	t.Helper()
	req := &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwo()},
		CapacityRange: &csi.CapacityRange{RequiredBytes: size},
	}
	if snapshotID != "" {
		req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshotID}}}
	}
	resp, err := h.ctrl.CreateVolume(t.Context(), req)
	if err != nil {
		t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return resp.GetVolume()
}

func (h *harness) createSnapshot(t *testing.T, name, volumeID string) *csi.Snapshot {
	t.Helper()
	resp, err := h.ctrl.CreateSnapshot(t.Context(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		t.Fatalf("CreateSnapshot(%s): %v", name, err)
	}
	return resp.GetSnapshot()
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

func TestIdentity(t *testing.T) {
	h := newHarness(t)
	info, err := h.id.GetPluginInfo(t.Context(), &csi.GetPluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != DefaultDriverName || info.GetVendorVersion() != "test" {
		t.Errorf("GetPluginInfo = %v", info)
	}
	caps, err := h.id.GetPluginCapabilities(t.Context(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range caps.GetCapabilities() {
		got = append(got, c.GetService().GetType().String())
	}
	if want := []string{"CONTROLLER_SERVICE", "VOLUME_ACCESSIBILITY_CONSTRAINTS"}; !cmp.Equal(got, want) {
		t.Errorf("plugin capabilities %v, want %v", got, want)
	}
	if _, err := h.id.Probe(t.Context(), &csi.ProbeRequest{}); err != nil {
		t.Errorf("Probe: %v", err)
	}
	ccaps, err := h.ctrl.ControllerGetCapabilities(t.Context(), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ccaps.GetCapabilities()); n != 4 {
		t.Errorf("%d controller capabilities, want 4", n)
	}
}

func TestCreateVolume(t *testing.T) {
	h := newHarness(t)
	first := h.createVolume(t, "pvc-1", 1<<20, "")
	if !strings.HasPrefix(first.GetVolumeId(), volumePrefix) || first.GetCapacityBytes() != 1<<20 {
		t.Fatalf("created %v", first)
	}
	if got := first.GetAccessibleTopology(); len(got) != 1 || got[0].GetSegments()[h.d.TopologyKey()] != "node-1" {
		t.Errorf("accessible topology %v", got)
	}
	if fi, err := os.Stat(h.d.store.volumeDataDir(first.GetVolumeId())); err != nil || !fi.IsDir() {
		t.Fatalf("volume directory: %v", err)
	}

	block := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: rwo().GetAccessMode(),
	}
	snapSource := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	}
	tests := []struct {
		name   string
		req    *csi.CreateVolumeRequest
		want   codes.Code
		wantID string
	}{
		{"same name and size: same volume", &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{rwo()},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}}, codes.OK, first.GetVolumeId()},
		{"same name, range still fits", &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{rwo()},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1000, LimitBytes: 2 << 20}}, codes.OK, first.GetVolumeId()},
		{"same name, bigger", &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{rwo()},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}}, codes.AlreadyExists, ""},
		{"same name, from a snapshot", &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{rwo()},
			VolumeContentSource: snapSource(nameID(snapshotPrefix, "x"))}, codes.AlreadyExists, ""},
		{"no name", &csi.CreateVolumeRequest{VolumeCapabilities: []*csi.VolumeCapability{rwo()}}, codes.InvalidArgument, ""},
		{"no capabilities", &csi.CreateVolumeRequest{Name: "pvc-2"}, codes.InvalidArgument, ""},
		{"block", &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{block}}, codes.InvalidArgument, ""},
		{"multi-node", &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{
			mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}}, codes.InvalidArgument, ""},
		{"limit below required", &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{rwo()},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 10, LimitBytes: 5}}, codes.InvalidArgument, ""},
		{"missing snapshot", &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{rwo()},
			VolumeContentSource: snapSource(nameID(snapshotPrefix, "nope"))}, codes.NotFound, ""},
		{"clone", &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{rwo()},
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: first.GetVolumeId()}}}}, codes.InvalidArgument, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := h.ctrl.CreateVolume(t.Context(), tt.req)
			wantCode(t, "CreateVolume", err, tt.want)
			if tt.wantID != "" && resp.GetVolume().GetVolumeId() != tt.wantID {
				t.Errorf("volume id %q, want %q", resp.GetVolume().GetVolumeId(), tt.wantID)
			}
		})
	}
	// No failed request left a volume or a temporary directory behind.
	ents, err := os.ReadDir(h.d.store.kindDir(volumePrefix))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != first.GetVolumeId() {
		t.Errorf("volumes directory holds %v", ents)
	}

	_, err = h.ctrl.ValidateVolumeCapabilities(t.Context(), &csi.ValidateVolumeCapabilitiesRequest{
		VolumeId: first.GetVolumeId(), VolumeCapabilities: []*csi.VolumeCapability{rwo()}})
	if err != nil {
		t.Errorf("ValidateVolumeCapabilities: %v", err)
	}
	vr, err := h.ctrl.ValidateVolumeCapabilities(t.Context(), &csi.ValidateVolumeCapabilitiesRequest{
		VolumeId: first.GetVolumeId(), VolumeCapabilities: []*csi.VolumeCapability{block}})
	if err != nil || vr.GetConfirmed() != nil || vr.GetMessage() == "" {
		t.Errorf("ValidateVolumeCapabilities(block) = %v, %v; want unconfirmed with a message", vr, err)
	}
	_, err = h.ctrl.ValidateVolumeCapabilities(t.Context(), &csi.ValidateVolumeCapabilitiesRequest{
		VolumeId: nameID(volumePrefix, "nope"), VolumeCapabilities: []*csi.VolumeCapability{rwo()}})
	wantCode(t, "ValidateVolumeCapabilities(missing)", err, codes.NotFound)
	if c, err := h.ctrl.GetCapacity(t.Context(), &csi.GetCapacityRequest{}); err != nil || c.GetAvailableCapacity() <= 0 {
		t.Errorf("GetCapacity = %v, %v", c, err)
	}
}

func TestDeleteVolume(t *testing.T) {
	h := newHarness(t)
	v := h.createVolume(t, "pvc-1", 0, "")
	if v.GetCapacityBytes() != DefaultCapacityBytes {
		t.Errorf("capacity %d, want the default %d", v.GetCapacityBytes(), DefaultCapacityBytes)
	}
	data := h.d.store.volumeDataDir(v.GetVolumeId())
	// A pod may leave read-only directories behind.
	if err := os.MkdirAll(filepath.Join(data, "ro", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(data, "ro"), 0o500); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the second delete finds nothing, and succeeds
		if _, err := h.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
			t.Fatalf("DeleteVolume #%d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(h.d.store.dir(volumePrefix, v.GetVolumeId())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("volume directory after delete: %v", err)
	}
	ents, _ := os.ReadDir(h.d.store.kindDir(volumePrefix))
	if len(ents) != 0 {
		t.Errorf("volumes directory holds %v after delete", ents)
	}
	_, err := h.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{})
	wantCode(t, "DeleteVolume()", err, codes.InvalidArgument)
	// The name is free again: a new volume, empty.
	v2 := h.createVolume(t, "pvc-1", 0, "")
	if ents, _ := os.ReadDir(h.d.store.volumeDataDir(v2.GetVolumeId())); len(ents) != 0 {
		t.Errorf("recreated volume holds %v", ents)
	}
}

// tree reads every file, directory and link under dir: path -> contents,
// "dir <mode>" or "link -> target".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out[rel] = "dir " + info.Mode().Perm().String()
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link -> " + target
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = info.Mode().Perm().String() + " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, contents := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(contents), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	h := newHarness(t)
	src := h.createVolume(t, "pvc-src", 1<<20, "")
	data := h.d.store.volumeDataDir(src.GetVolumeId())
	writeFiles(t, data, map[string]string{
		"segments/00000001.log": "first segment",
		"segments/00000002.log": "second",
		"meta/epoch":            "7",
	})
	if err := os.Symlink("segments/00000002.log", filepath.Join(data, "current")); err != nil {
		t.Fatal(err)
	}
	// A link that points out of the volume is copied as a link, not followed.
	if err := os.Symlink("/etc/hostname", filepath.Join(data, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(data, "meta"), 0o700); err != nil {
		t.Fatal(err)
	}
	want := tree(t, data)

	snap := h.createSnapshot(t, "snap-1", src.GetVolumeId())
	if !snap.GetReadyToUse() || snap.GetSourceVolumeId() != src.GetVolumeId() || snap.GetCreationTime() == nil ||
		snap.GetSizeBytes() != 1<<20 {
		t.Errorf("snapshot %v", snap)
	}
	again := h.createSnapshot(t, "snap-1", src.GetVolumeId())
	if again.GetSnapshotId() != snap.GetSnapshotId() || !again.GetCreationTime().AsTime().Equal(snap.GetCreationTime().AsTime()) {
		t.Errorf("repeated CreateSnapshot = %v, want %v", again, snap)
	}

	// Changes after the snapshot are not in it.
	writeFiles(t, data, map[string]string{"segments/00000001.log": "overwritten", "late": "x"})

	restored := h.createVolume(t, "pvc-restored", 1<<20, snap.GetSnapshotId())
	if restored.GetContentSource().GetSnapshot().GetSnapshotId() != snap.GetSnapshotId() {
		t.Errorf("restored volume's content source %v", restored.GetContentSource())
	}
	rdata := h.d.store.volumeDataDir(restored.GetVolumeId())
	got := tree(t, rdata)
	got["."] = want["."] // the volume's root is 0777 whatever the source's mode
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("restored tree differs from the snapshotted one (-want +got):\n%s", diff)
	}

	// Snapshots and restored volumes are copies: deleting the source volume
	// and the snapshot leaves the restored volume as it was.
	if _, err := h.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: src.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := h.ctrl.DeleteSnapshot(t.Context(), &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(got, func() map[string]string { m := tree(t, rdata); m["."] = want["."]; return m }()); diff != "" {
		t.Errorf("restored volume changed (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		req  *csi.CreateSnapshotRequest
		want codes.Code
	}{
		{"no name", &csi.CreateSnapshotRequest{SourceVolumeId: restored.GetVolumeId()}, codes.InvalidArgument},
		{"no source", &csi.CreateSnapshotRequest{Name: "s"}, codes.InvalidArgument},
		{"deleted source", &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: src.GetVolumeId()}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.ctrl.CreateSnapshot(t.Context(), tt.req)
			wantCode(t, "CreateSnapshot", err, tt.want)
		})
	}
	h.createSnapshot(t, "snap-2", restored.GetVolumeId())
	other := h.createVolume(t, "pvc-other", 0, "")
	_, err := h.ctrl.CreateSnapshot(t.Context(), &csi.CreateSnapshotRequest{Name: "snap-2", SourceVolumeId: other.GetVolumeId()})
	wantCode(t, "CreateSnapshot(name taken by another volume's)", err, codes.AlreadyExists)
	_, err = h.ctrl.CreateVolume(t.Context(), &csi.CreateVolumeRequest{
		Name: "too-small", VolumeCapabilities: []*csi.VolumeCapability{rwo()}, CapacityRange: &csi.CapacityRange{RequiredBytes: 3},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: nameID(snapshotPrefix, "snap-2")}}}})
	wantCode(t, "CreateVolume(smaller than the snapshot)", err, codes.OutOfRange)
}

func TestListSnapshots(t *testing.T) {
	h := newHarness(t)
	a := h.createVolume(t, "a", 0, "")
	b := h.createVolume(t, "b", 0, "")
	ids := map[string][]string{}
	for i, v := range []*csi.Volume{a, a, b} {
		s := h.createSnapshot(t, "s"+string(rune('0'+i)), v.GetVolumeId())
		ids[v.GetVolumeId()] = append(ids[v.GetVolumeId()], s.GetSnapshotId())
		ids[""] = append(ids[""], s.GetSnapshotId())
	}
	for _, l := range ids {
		sort.Strings(l)
	}
	list := func(req *csi.ListSnapshotsRequest) ([]string, string, error) {
		resp, err := h.ctrl.ListSnapshots(t.Context(), req)
		var got []string
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetSnapshot().GetSnapshotId())
			if !e.GetSnapshot().GetReadyToUse() {
				t.Errorf("listed snapshot not ready: %v", e.GetSnapshot())
			}
		}
		return got, resp.GetNextToken(), err
	}
	tests := []struct {
		name      string
		req       *csi.ListSnapshotsRequest
		want      []string
		wantToken string
		wantCode  codes.Code
	}{
		{"all", &csi.ListSnapshotsRequest{}, ids[""], "", codes.OK},
		{"by id", &csi.ListSnapshotsRequest{SnapshotId: ids[b.GetVolumeId()][0]}, ids[b.GetVolumeId()], "", codes.OK},
		{"by source volume", &csi.ListSnapshotsRequest{SourceVolumeId: a.GetVolumeId()}, ids[a.GetVolumeId()], "", codes.OK},
		{"by id and another volume", &csi.ListSnapshotsRequest{SnapshotId: ids[b.GetVolumeId()][0], SourceVolumeId: a.GetVolumeId()}, nil, "", codes.OK},
		{"missing id", &csi.ListSnapshotsRequest{SnapshotId: nameID(snapshotPrefix, "nope")}, nil, "", codes.OK},
		{"malformed id", &csi.ListSnapshotsRequest{SnapshotId: "../volumes"}, nil, "", codes.OK},
		{"first page", &csi.ListSnapshotsRequest{MaxEntries: 2}, ids[""][:2], "2", codes.OK},
		{"last page", &csi.ListSnapshotsRequest{MaxEntries: 2, StartingToken: "2"}, ids[""][2:], "", codes.OK},
		{"bad token", &csi.ListSnapshotsRequest{StartingToken: "x"}, nil, "", codes.Aborted},
		{"token past the end", &csi.ListSnapshotsRequest{StartingToken: "4"}, nil, "", codes.Aborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, token, err := list(tt.req)
			wantCode(t, "ListSnapshots", err, tt.wantCode)
			if !cmp.Equal(got, tt.want) || token != tt.wantToken {
				t.Errorf("ListSnapshots = %v, token %q; want %v, token %q", got, token, tt.want, tt.wantToken)
			}
		})
	}
}

// TestUntrustedIDsRefused sends ids that would name paths outside the
// state directory, or other objects' directories, to every call taking one.
// No path is built from them: they name no object, so the calls answer as
// the CSI spec asks for an unknown id (NOT_FOUND; success for a delete),
// and nothing outside or inside the state directory is touched.
func TestUntrustedIDsRefused(t *testing.T) {
	h := newHarness(t)
	v := h.createVolume(t, "pvc", 0, "")
	s := h.createSnapshot(t, "snap", v.GetVolumeId())
	// Something a traversal could reach: a sibling of the state directory.
	victim := filepath.Join(filepath.Dir(h.d.store.root), "victim")
	if err := os.MkdirAll(filepath.Join(victim, dataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, victim, map[string]string{metaFile: `{"id":"victim"}`})

	bad := []string{
		"../../victim", "../snapshots/" + s.GetSnapshotId(), "/etc", "vol-/../../victim",
		"vol-" + strings.Repeat("A", 32), "vol-" + strings.Repeat("0", 31), v.GetVolumeId() + "/..",
		s.GetSnapshotId(), // a snapshot id where a volume id belongs
		"vol-" + strings.Repeat("0", 31) + "\x00",
	}
	target := filepath.Join(h.kubeletDir, "pods", "p", "mount")
	for _, id := range bad {
		calls := map[string]func() error{
			"DeleteVolume": func() error {
				_, err := h.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: id})
				return err
			},
			"ValidateVolumeCapabilities": func() error {
				_, err := h.ctrl.ValidateVolumeCapabilities(t.Context(), &csi.ValidateVolumeCapabilitiesRequest{
					VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{rwo()}})
				return err
			},
			"CreateSnapshot": func() error {
				_, err := h.ctrl.CreateSnapshot(t.Context(), &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: id})
				return err
			},
			"DeleteSnapshot": func() error {
				sid := strings.Replace(id, "vol-", "snap-", 1)
				if sid == s.GetSnapshotId() {
					sid = v.GetVolumeId() // a volume id where a snapshot id belongs
				}
				_, err := h.ctrl.DeleteSnapshot(t.Context(), &csi.DeleteSnapshotRequest{SnapshotId: sid})
				return err
			},
			"CreateVolume from snapshot": func() error {
				_, err := h.ctrl.CreateVolume(t.Context(), &csi.CreateVolumeRequest{
					Name: "x" + id, VolumeCapabilities: []*csi.VolumeCapability{rwo()},
					VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
						Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: strings.Replace(id, "vol-", "snap-", 1)}}}})
				return err
			},
			"NodePublishVolume": func() error {
				_, err := h.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{
					VolumeId: id, TargetPath: target, VolumeCapability: rwo()})
				return err
			},
			"NodeUnpublishVolume": func() error {
				_, err := h.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
				return err
			},
		}
		for name, call := range calls {
			err := call()
			if name == "CreateVolume from snapshot" && id == s.GetSnapshotId() {
				continue // a valid snapshot id there
			}
			want := codes.NotFound
			if strings.HasPrefix(name, "Delete") {
				want = codes.OK
			}
			wantCode(t, name+"("+id+")", err, want)
		}
	}
	for _, p := range []string{filepath.Join(victim, metaFile), h.d.store.volumeDataDir(v.GetVolumeId()), h.d.store.dir(snapshotPrefix, s.GetSnapshotId())} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}

	// Target paths from the wire are checked too.
	for _, target := range []string{"relative/path", h.kubeletDir + "/pods/../../escape", "/etc", h.kubeletDir} {
		_, err := h.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{
			VolumeId: v.GetVolumeId(), TargetPath: target, VolumeCapability: rwo()})
		wantCode(t, "NodePublishVolume(target "+target+")", err, codes.InvalidArgument)
	}
}

func TestRegistration(t *testing.T) {
	dir := t.TempDir()
	statuses := make(chan *registerapi.RegistrationStatus, 1)
	reg := NewRegistrar("hostpath.csi.example", "/var/lib/kubelet/plugins/hostpath.csi.example/csi.sock", testr.New(t), statuses)
	if got, want := RegistrationSocket("/r", "d.example"), "/r/d.example-reg.sock"; got != want {
		t.Errorf("RegistrationSocket = %q, want %q", got, want)
	}
	c := registerapi.NewRegistrationClient(serve(t, dir, reg.Register))
	info, err := c.GetInfo(t.Context(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &registerapi.PluginInfo{
		Type: registerapi.CSIPlugin, Name: "hostpath.csi.example",
		Endpoint: "/var/lib/kubelet/plugins/hostpath.csi.example/csi.sock", SupportedVersions: []string{"1.0.0"},
	}
	if info.GetType() != want.GetType() || info.GetName() != want.GetName() || info.GetEndpoint() != want.GetEndpoint() ||
		!cmp.Equal(info.GetSupportedVersions(), want.GetSupportedVersions()) {
		t.Errorf("GetInfo = %v, want %v", info, want)
	}
	if _, err := c.NotifyRegistrationStatus(t.Context(), &registerapi.RegistrationStatus{PluginRegistered: false, Error: "no"}); err != nil {
		t.Fatal(err)
	}
	if st := <-statuses; st.GetPluginRegistered() || st.GetError() != "no" {
		t.Errorf("status %v", st)
	}
}

func TestNodeGetInfo(t *testing.T) {
	h := newHarness(t)
	info, err := h.node.NodeGetInfo(t.Context(), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetNodeId() != "node-1" || info.GetAccessibleTopology().GetSegments()["topology."+DefaultDriverName+"/node"] != "node-1" {
		t.Errorf("NodeGetInfo = %v", info)
	}
	if _, err := h.node.NodeGetCapabilities(t.Context(), &csi.NodeGetCapabilitiesRequest{}); err != nil {
		t.Error(err)
	}
}

// TestNodePublish mounts for real, so it needs root (CAP_SYS_ADMIN).
func TestNodePublish(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("NodePublishVolume bind mounts (mount(2)): run the tests as root to cover it")
	}
	h := newHarness(t)
	v := h.createVolume(t, "pvc", 0, "")
	writeFiles(t, h.d.store.volumeDataDir(v.GetVolumeId()), map[string]string{"hello": "world"})
	rw := filepath.Join(h.kubeletDir, "pods", "p1", "volumes", "mount")
	ro := filepath.Join(h.kubeletDir, "pods", "p2", "volumes", "mount")
	publish := func(target string, readOnly bool) error {
		_, err := h.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{
			VolumeId: v.GetVolumeId(), TargetPath: target, VolumeCapability: rwo(), Readonly: readOnly})
		return err
	}
	unpublish := func(target string) error {
		_, err := h.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target})
		return err
	}
	t.Cleanup(func() { // leave no mount behind, whatever failed
		for _, p := range []string{rw, ro} {
			for range maxStackedMounts {
				if syscall.Unmount(p, 0) != nil {
					break
				}
			}
		}
	})
	for range 2 { // the second publish finds it mounted
		if err := publish(rw, false); err != nil {
			t.Fatalf("NodePublishVolume: %v", err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(rw, "hello")); err != nil || string(b) != "world" {
		t.Errorf("read through the mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(rw, "from-pod"), []byte("x"), 0o644); err != nil {
		t.Errorf("write through the mount: %v", err)
	}
	if _, err := os.Stat(filepath.Join(h.d.store.volumeDataDir(v.GetVolumeId()), "from-pod")); err != nil {
		t.Errorf("a file written through the mount is not in the volume: %v", err)
	}
	wantCode(t, "NodePublishVolume(read-only over read-write)", publish(rw, true), codes.AlreadyExists)

	if err := publish(ro, true); err != nil {
		t.Fatalf("NodePublishVolume(read-only): %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ro, "hello")); err != nil || string(b) != "world" {
		t.Errorf("read through the read-only mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "nope"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through the read-only mount: %v, want EROFS", err)
	}

	for _, target := range []string{rw, ro} {
		for range 2 { // the second unpublish finds nothing to do
			if err := unpublish(target); err != nil {
				t.Fatalf("NodeUnpublishVolume(%s): %v", target, err)
			}
		}
		if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("target %s after unpublish: %v", target, err)
		}
	}
	if _, err := os.Stat(filepath.Join(h.d.store.volumeDataDir(v.GetVolumeId()), "hello")); err != nil {
		t.Errorf("volume contents after unpublish: %v", err)
	}
	_, err := h.node.NodeUnpublishVolume(t.Context(), &csi.NodeUnpublishVolumeRequest{
		VolumeId: nameID(volumePrefix, "nope"), TargetPath: rw})
	wantCode(t, "NodeUnpublishVolume(missing volume)", err, codes.NotFound)

	// A volume deleted while published: unpublishing still cleans up.
	if err := publish(rw, false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ctrl.DeleteVolume(t.Context(), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if err := unpublish(rw); err != nil {
		t.Errorf("NodeUnpublishVolume of a deleted volume's mount: %v", err)
	}
	if mounted, _, err := (SystemMounter{}).MountPoint(rw); mounted || err != nil {
		t.Errorf("%s still mounted (%v)", rw, err)
	}
	wantCode(t, "NodeUnpublishVolume(deleted volume, again)", unpublish(rw), codes.NotFound)
	wantCode(t, "NodePublishVolume(missing volume)", func() error {
		_, err := h.node.NodePublishVolume(t.Context(), &csi.NodePublishVolumeRequest{
			VolumeId: nameID(volumePrefix, "nope"), TargetPath: rw, VolumeCapability: rwo()})
		return err
	}(), codes.NotFound)
}

func TestNewStoreRemovesLeftovers(t *testing.T) {
	root := t.TempDir()
	s, err := newStore(root)
	if err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(s.kindDir(volumePrefix), tmpPrefix+"vol-x-123")
	if err := os.MkdirAll(filepath.Join(left, dataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := newStore(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("leftover after reopening: %v", err)
	}
	if _, err := newStore("relative"); err == nil {
		t.Error("newStore accepted a relative directory")
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/with\040space`, "/with space"},
		{`/tab\011and\134backslash`, "/tab\tand\\backslash"},
		{`/trailing\04`, `/trailing\04`},
	}
	for _, tt := range tests {
		if got := unescapeMountinfo(tt.in); got != tt.want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A snapshot's restore size is its source's capacity, not the apparent
// size of what it holds: a broker's store preallocates sparse files far
// longer than its claim (2.2 GB on a 256Mi claim on the real node), and a
// size above the claim's made the external-provisioner refuse every
// restore to a claim of the source's size.
func TestSnapshotRestoreSizeIsTheSourceCapacity(t *testing.T) {
	h := newHarness(t)
	src := h.createVolume(t, "pvc-sparse", 1<<20, "")
	f, err := os.Create(filepath.Join(h.d.store.volumeDataDir(src.GetVolumeId()), "000001.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 << 20); err != nil { // sparse: 8 MiB apparent
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	snap := h.createSnapshot(t, "snap-sparse", src.GetVolumeId())
	if snap.GetSizeBytes() != 1<<20 {
		t.Fatalf("restore size %d, want the source's capacity %d", snap.GetSizeBytes(), 1<<20)
	}
	restored := h.createVolume(t, "pvc-restored", 1<<20, snap.GetSnapshotId())
	if fi, err := os.Stat(filepath.Join(h.d.store.volumeDataDir(restored.GetVolumeId()), "000001.vlog")); err != nil || fi.Size() != 8<<20 {
		t.Fatalf("restored file: %v %v", fi, err)
	}
}

// A snapshot keeps a sparse file's holes: the copy's content equals the
// source's, and it takes about the blocks of its data, not its length.
func TestSnapshotKeepsHoles(t *testing.T) {
	h := newHarness(t)
	src := h.createVolume(t, "pvc-holes", 1<<20, "")
	name := filepath.Join(h.d.store.volumeDataDir(src.GetVolumeId()), "000001.vlog")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("middle"), 16<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	snap := h.createSnapshot(t, "snap-holes", src.GetVolumeId())
	copied := filepath.Join(h.d.store.dir(snapshotPrefix, snap.GetSnapshotId()), dataDir, "000001.vlog")
	want, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(copied)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the copy differs from its source (%d and %d bytes)", len(got), len(want))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(copied, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 4<<20 {
		t.Errorf("the copy of a 64 MiB file holding 10 bytes uses %d bytes on disk: its holes were written out", used)
	}
}
