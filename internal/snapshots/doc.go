// Package snapshots plays the CSI snapshot controller and driver on a
// local cluster whose volumes are the podrunner's directories, using the
// VolumeSnapshot API types of the external-snapshotter client module.
//
//   - A VolumeSnapshot whose source is a PersistentVolumeClaim becomes a
//     copy of the claim's directory in StateDir/snapshots/<ns>/<name>,
//     taken with the claim's pods frozen (SIGSTOP) so it is
//     crash-consistent; the controller creates a bound
//     VolumeSnapshotContent and sets status.readyToUse=true,
//     status.creationTime and status.restoreSize.
//   - A claim whose dataSource (or dataSourceRef) is a VolumeSnapshot
//     starts as a copy of that content: the podrunner provisions it
//     through Controller.SnapshotDir (podrunner.SnapshotSource).
//   - Deleting a VolumeSnapshot deletes its directory and content
//     (deletionPolicy Delete).
//
// The CRDs (unchanged copies from the module) are embedded; InstallCRDs
// puts them into an API server and CRDDir names their directory.
package snapshots
