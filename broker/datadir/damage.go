package datadir

import (
	"fmt"
	"os"
	"path/filepath"
)

// RotateForDamage gives up the directory's claim to the data it holds
// after the log store found damage to acknowledged data on open: the same
// step as a [ID-3] rotation, taken after the stores opened. It durably
// writes a new storage id, unless one was already made at this start (an
// id never announced claims nothing), and returns the id to use from now
// on. The caller then empties the damaged logs and, in a cluster,
// registers the returned id with the control plane and records the grant
// (RecordReRegistration) before serving, so that no leader or placement
// decision counts what this directory held under the old id.
//
// A crash after the new id is written and before the damaged logs are
// emptied is safe: the next start keeps the new id, the store finds the
// same damage and the logs are emptied then.
func (s *Running) RotateForDamage() (StorageID, bool, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.phase != phaseRunning {
		return StorageID{}, false, errStepOrderf("RotateForDamage", phaseRunning, d.phase)
	}
	if d.rotated {
		return d.id, false, nil
	}
	if err := d.rotate(); err != nil {
		return StorageID{}, false, d.fail(err)
	}
	s.id = d.id
	s.decision.Action, s.decision.Reason = New, ReasonLogStoreDamaged
	d.log.Info("storage identity: rotated: the log store found damaged acknowledged data", "storageID", d.id.String())
	return d.id, true, nil
}

// RecordReRegistration records inc, the incarnation the control plane gave
// when the id from RotateForDamage was registered, in the registration
// file [ID-2].
func (s *Running) RecordReRegistration(inc Incarnation) error {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.phase != phaseRunning {
		return errStepOrderf("RecordReRegistration", phaseRunning, d.phase)
	}
	if err := writeFileAtomic(d.path, RegistrationFile, encodeRegistrationFile(inc)); err != nil {
		return d.fail(err)
	}
	return nil
}

// ForgetStorageID removes the storage-id file durably, so the next start
// makes a new id (reason storage_id_missing) and claims nothing this
// directory held: what an explicit repair that gave up records does
// (felix log repair). The directory must be locked by the caller (Open).
func (d *Dir) ForgetStorageID() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.Remove(filepath.Join(d.path, StorageIDFile)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("datadir: remove %s: %w", StorageIDFile, err)
	}
	return syncDir(d.path)
}

func errStepOrderf(step string, want, got phase) error {
	return fmt.Errorf("%w: %s needs phase %v, directory is %v", ErrStepOrder, step, want, got)
}
