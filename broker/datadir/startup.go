package datadir

import (
	"errors"
	"fmt"
)

// Identify is step (a) of [ID-4]: it syncs the filesystem, reads
// storage-id, run-state, registration and the boot id, decides on local
// facts alone (Decide with ControlPlaneNotAsked) and, if the decision is
// New, writes a new storage id before returning. It must run before any
// store opens. Corrupt files are facts, not errors; an error means an
// identity file could not be read or written, and the broker must not
// start.
func (d *Dir) Identify() (*Identified, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.advance("Identify", phaseOpened, phaseIdentified); err != nil {
		return nil, err
	}
	f, id, err := d.gatherFacts()
	if err != nil {
		return nil, d.fail(err)
	}
	d.facts, d.id = f, id
	dec := Decide(f)
	if dec.Action == New {
		if err := d.rotate(); err != nil {
			return nil, d.fail(err)
		}
	}
	d.log.Info("storage identity: local check", "action", dec.Action.String(), "reason", dec.Reason.String(),
		"storageID", d.id.String(), "storageIDFile", f.StorageID.String(), "runStateFile", f.RunState.String(),
		"bootKnown", f.CurrentBootID != "", "syncfsOK", f.SyncFSOK)
	return &Identified{d: d, decision: dec}, nil
}

// gatherFacts reads what the rotation decision looks at. syncfs runs
// first so that it flushes what the previous run left in the page cache.
// Callers hold d.mu.
func (d *Dir) gatherFacts() (Facts, StorageID, error) {
	var f Facts
	if err := d.opts.SyncFS(d.path); err != nil {
		d.log.Info("syncfs of the data directory failed; an unclean Periodic/None stop will rotate", "error", err.Error())
	} else {
		f.SyncFSOK = true
	}
	if boot, err := ReadBootID(d.opts.BootIDPath); err != nil {
		d.log.Info("boot id unknown; an unclean Periodic/None stop will rotate", "error", err.Error())
	} else {
		f.CurrentBootID = boot
	}

	var id StorageID
	data, ok, err := readSmallFile(d.path, StorageIDFile)
	if err != nil {
		return Facts{}, StorageID{}, err
	}
	f.StorageID, id = judge(ok, data, decodeStorageIDFile)
	data, ok, err = readSmallFile(d.path, RunStateFile)
	if err != nil {
		return Facts{}, StorageID{}, err
	}
	f.RunState, f.Run = judge(ok, data, decodeRunStateFile)
	data, ok, err = readSmallFile(d.path, RegistrationFile)
	if err != nil {
		return Facts{}, StorageID{}, err
	}
	f.Registration, f.Registered = judge(ok, data, decodeRegistrationFile)
	return f, id, nil
}

// judge turns a file read into a FileState and, when valid, its value.
func judge[T any](present bool, data []byte, decode func([]byte) (T, error)) (FileState, T) {
	var zero T
	if !present {
		return FileMissing, zero
	}
	v, err := decode(data)
	if err != nil {
		return FileCorrupt, zero
	}
	return FileValid, v
}

// Identified is the result of step (a). The caller now asks the control
// plane for this node's current incarnation (step (b)) and passes the
// answer to CheckIncarnation; a broker without a control plane calls
// Standalone instead. Exactly one of them may be called, once.
type Identified struct {
	d        *Dir
	decision Decision
}

// StorageID returns the id after step (a): the one found, or the new one.
// CheckIncarnation may still replace it.
func (s *Identified) StorageID() StorageID {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.id
}

// Decision returns the local decision of step (a).
func (s *Identified) Decision() Decision { return s.decision }

// Facts returns what step (a) found, for logs and diagnostics.
func (s *Identified) Facts() Facts {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.facts
}

// errNotAsked is returned by CheckIncarnation for ControlPlaneNotAsked.
var errNotAsked = errors.New("CheckIncarnation needs the control plane's answer; use Standalone without a control plane")

// CheckIncarnation is step (c) of [ID-4]: it applies the incarnation check
// to the control plane's answer cp (ControlPlaneKnown or
// ControlPlaneNoRecord) and writes a new storage id if the check asks for
// one and step (a) had not already made one (an id made at this start was
// never announced, so a second one would add nothing). The caller then
// registers Verified.StorageID with the control plane.
func (s *Identified) CheckIncarnation(cp ControlPlane) (*Verified, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if cp.State != ControlPlaneKnown && cp.State != ControlPlaneNoRecord {
		return nil, fmt.Errorf("%w: %w", ErrStepOrder, errNotAsked)
	}
	if err := d.advance("CheckIncarnation", phaseIdentified, phaseVerified); err != nil {
		return nil, err
	}
	f := d.facts
	f.ControlPlane = cp
	d.facts = f
	dec := Decide(f)
	if dec.Action == New && !d.rotated {
		if err := d.rotate(); err != nil {
			return nil, d.fail(err)
		}
	}
	d.log.Info("storage identity: incarnation check", "action", dec.Action.String(), "reason", dec.Reason.String(),
		"local", dec.Local.String(), "incarnationCheck", dec.Incarnation.String(), "controlPlane", cp.State.String(),
		"controlPlaneIncarnation", uint64(cp.Incarnation), "registrationFile", f.Registration.String(),
		"registeredIncarnation", uint64(f.Registered), "storageID", d.id.String())
	return &Verified{d: d, decision: dec}, nil
}

// Standalone replaces steps (b)..(d) for a broker without a control
// plane: no incarnation check, and the registration file is left as it
// is. Restores of a standalone broker's directory are invisible to every
// check; docs/backup-restore.md says to delete storage-id before starting.
func (s *Identified) Standalone() (*Prepared, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.advance("Standalone", phaseIdentified, phasePrepared); err != nil {
		return nil, err
	}
	return &Prepared{d: d, decision: s.decision}, nil
}

// Verified is the result of step (c): the storage id is final for this
// run. The caller registers it with the control plane and passes the
// incarnation it was given to RecordRegistration.
type Verified struct {
	d        *Dir
	decision Decision
}

// StorageID returns the final storage id of this run, the one to register.
func (s *Verified) StorageID() StorageID {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.id
}

// Decision returns the full decision, incarnation check included.
func (s *Verified) Decision() Decision { return s.decision }

// RecordRegistration is step (d) of [ID-4]: it durably records inc, the
// incarnation the control plane gave at the registration that just
// succeeded, in the registration file [ID-2]. It must run before any store
// opens, so that a directory never serves data under a registration it
// has not recorded.
func (s *Verified) RecordRegistration(inc Incarnation) (*Prepared, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.advance("RecordRegistration", phaseVerified, phasePrepared); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(d.path, RegistrationFile, encodeRegistrationFile(inc)); err != nil {
		return nil, d.fail(err)
	}
	return &Prepared{d: d, decision: s.decision}, nil
}

// Prepared is the directory ready to be marked running.
type Prepared struct {
	d        *Dir
	decision Decision
}

// StorageID returns the final storage id of this run.
func (s *Prepared) StorageID() StorageID {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.id
}

// Decision returns the startup decision.
func (s *Prepared) Decision() Decision { return s.decision }

// MarkRunning is step (e) of [ID-4]: it durably writes the run-state
// record "running" with the current boot id and Options.Fsync. It must
// run before any store opens: from here until MarkCleanStop, a crash
// reads as an unclean stop.
func (s *Prepared) MarkRunning() (*Running, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.advance("MarkRunning", phasePrepared, phaseRunning); err != nil {
		return nil, err
	}
	if err := d.writeRunState(PhaseRunning); err != nil {
		return nil, d.fail(err)
	}
	return &Running{d: d, decision: s.decision, id: d.id}, nil
}

// Running is a directory in use by a serving broker.
type Running struct {
	d        *Dir
	decision Decision
	id       StorageID
}

// StorageID returns the storage id of this run. It changes only through
// RotateForDamage, before the broker serves.
func (s *Running) StorageID() StorageID {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.id
}

// Decision returns the startup decision that produced StorageID, for
// logs, events and metrics.
func (s *Running) Decision() Decision { return s.decision }

// MarkCleanStop is step (f): it durably writes the run-state record
// "clean-stop". Call it only after every store in the directory has been
// closed and synced (under every fsync mode, None included); the next
// start keeps the id on the strength of this record alone.
func (s *Running) MarkCleanStop() error {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.advance("MarkCleanStop", phaseRunning, phaseStopped); err != nil {
		return err
	}
	if err := d.writeRunState(PhaseCleanStop); err != nil {
		return d.fail(err)
	}
	return nil
}
