package datadir

import (
	"testing"
)

const (
	bootA = "11111111-2222-3333-4444-555555555555"
	bootB = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
)

// factsWith returns the facts of a healthy directory (valid files, same
// known boot, syncfs ok, standalone) with the given run-state record,
// changed by edit.
func factsWith(phase RunPhase, mode FsyncMode, edit func(*Facts)) Facts {
	f := Facts{
		StorageID:     FileValid,
		RunState:      FileValid,
		Run:           RunState{Phase: phase, BootID: bootA, Fsync: mode},
		CurrentBootID: bootA,
		SyncFSOK:      true,
		Registration:  FileValid,
		Registered:    5,
	}
	if edit != nil {
		edit(&f)
	}
	return f
}

func known(n Incarnation) ControlPlane { return ControlPlane{State: ControlPlaneKnown, Incarnation: n} }

// TestID3_RotationDecision walks every row of the [ID-3] rotation
// table (docs/storage-identity.md), plus the unknown-evidence cases, through Decide.
func TestID3_RotationDecision(t *testing.T) {
	type row struct {
		name   string
		facts  Facts
		action Action
		reason Reason
		inc    Reason
	}
	var rows []row
	add := func(name string, f Facts, a Action, r, inc Reason) {
		rows = append(rows, row{name, f, a, r, inc})
	}
	nc := ReasonIncarnationNotChecked

	// Row: clean stop, then restart: keep (under every mode, even with
	// the boot changed or syncfs failing: a clean stop synced first).
	for _, m := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone} {
		add("clean stop/"+m.String(), factsWith(PhaseCleanStop, m, nil), Keep, ReasonCleanStop, nc)
		add("clean stop, then reboot/"+m.String(), factsWith(PhaseCleanStop, m, func(f *Facts) {
			f.CurrentBootID = bootB
			f.SyncFSOK = false
		}), Keep, ReasonCleanStop, nc)
		add("clean stop, boot unreadable/"+m.String(), factsWith(PhaseCleanStop, m, func(f *Facts) { f.CurrentBootID = "" }),
			Keep, ReasonCleanStop, nc)
	}
	for _, m := range []FsyncMode{FsyncPeriodic, FsyncNone} {
		// Row: process killed, same known boot, syncfs succeeds: keep.
		add("killed, same boot, syncfs ok/"+m.String(), factsWith(PhaseRunning, m, nil),
			Keep, ReasonUncleanSameBootSynced, nc)
		// Row: process killed, boot unknown or changed, or syncfs fails: new.
		add("killed, current boot unreadable/"+m.String(), factsWith(PhaseRunning, m, func(f *Facts) { f.CurrentBootID = "" }),
			New, ReasonUncleanBootUnknown, nc)
		add("killed, recorded boot unknown/"+m.String(), factsWith(PhaseRunning, m, func(f *Facts) { f.Run.BootID = "" }),
			New, ReasonUncleanBootUnknown, nc)
		add("killed, both boots unknown/"+m.String(), factsWith(PhaseRunning, m, func(f *Facts) {
			f.Run.BootID, f.CurrentBootID = "", ""
		}), New, ReasonUncleanBootUnknown, nc)
		add("killed, same boot, syncfs fails/"+m.String(), factsWith(PhaseRunning, m, func(f *Facts) { f.SyncFSOK = false }),
			New, ReasonUncleanSyncFSFailed, nc)
		// Row: machine crash under Periodic or None: new (the boot changed),
		// even if syncfs now succeeds.
		add("machine crash/"+m.String(), factsWith(PhaseRunning, m, func(f *Facts) { f.CurrentBootID = bootB }),
			New, ReasonUncleanBootChanged, nc)
		add("machine crash, syncfs fails/"+m.String(), factsWith(PhaseRunning, m, func(f *Facts) {
			f.CurrentBootID = bootB
			f.SyncFSOK = false
		}), New, ReasonUncleanBootChanged, nc)
	}
	// Row: crash under OnCommit: keep, whatever the boot or syncfs says.
	add("killed/on-commit", factsWith(PhaseRunning, FsyncOnCommit, nil), Keep, ReasonUncleanOnCommit, nc)
	add("machine crash/on-commit", factsWith(PhaseRunning, FsyncOnCommit, func(f *Facts) { f.CurrentBootID = bootB }),
		Keep, ReasonUncleanOnCommit, nc)
	add("crash, boot unknown, syncfs fails/on-commit", factsWith(PhaseRunning, FsyncOnCommit, func(f *Facts) {
		f.CurrentBootID, f.Run.BootID, f.SyncFSOK = "", "", false
	}), Keep, ReasonUncleanOnCommit, nc)

	// Row: control plane ahead of registration (restored directory): new,
	// even after a clean stop and under OnCommit.
	for _, m := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone} {
		add("control plane ahead/"+m.String(), factsWith(PhaseCleanStop, m, func(f *Facts) { f.ControlPlane = known(6) }),
			New, ReasonControlPlaneAhead, ReasonControlPlaneAhead)
	}
	add("control plane far ahead", factsWith(PhaseCleanStop, FsyncOnCommit, func(f *Facts) { f.ControlPlane = known(1 << 40) }),
		New, ReasonControlPlaneAhead, ReasonControlPlaneAhead)
	// A control plane that is behind says nothing about the directory: keep.
	add("control plane behind", factsWith(PhaseCleanStop, FsyncPeriodic, func(f *Facts) { f.ControlPlane = known(4) }),
		Keep, ReasonCleanStop, ReasonControlPlaneBehind)
	add("control plane behind at zero", factsWith(PhaseCleanStop, FsyncPeriodic, func(f *Facts) { f.ControlPlane = known(0) }),
		Keep, ReasonCleanStop, ReasonControlPlaneBehind)
	add("control plane equal", factsWith(PhaseCleanStop, FsyncPeriodic, func(f *Facts) { f.ControlPlane = known(5) }),
		Keep, ReasonCleanStop, ReasonControlPlaneEqual)
	add("control plane equal, killed same boot", factsWith(PhaseRunning, FsyncNone, func(f *Facts) { f.ControlPlane = known(5) }),
		Keep, ReasonUncleanSameBootSynced, ReasonControlPlaneEqual)
	add("control plane never registered the node", factsWith(PhaseCleanStop, FsyncPeriodic, func(f *Facts) {
		f.ControlPlane = ControlPlane{State: ControlPlaneNoRecord}
	}), Keep, ReasonCleanStop, ReasonControlPlaneNoRecord)
	add("control plane no record, no registration file", factsWith(PhaseCleanStop, FsyncPeriodic, func(f *Facts) {
		f.ControlPlane = ControlPlane{State: ControlPlaneNoRecord}
		f.Registration, f.Registered = FileMissing, 0
	}), Keep, ReasonCleanStop, ReasonControlPlaneNoRecord)
	// Standalone: registration file plays no part.
	add("standalone, registration corrupt", factsWith(PhaseCleanStop, FsyncPeriodic, func(f *Facts) {
		f.Registration, f.Registered = FileCorrupt, 0
	}), Keep, ReasonCleanStop, nc)
	// Control plane knows the node but the directory cannot show which
	// registration it saw: unknown, rotate.
	add("registration missing", factsWith(PhaseCleanStop, FsyncOnCommit, func(f *Facts) {
		f.ControlPlane = known(5)
		f.Registration, f.Registered = FileMissing, 0
	}), New, ReasonRegistrationMissing, ReasonRegistrationMissing)
	add("registration corrupt", factsWith(PhaseCleanStop, FsyncOnCommit, func(f *Facts) {
		f.ControlPlane = known(5)
		f.Registration, f.Registered = FileCorrupt, 0
	}), New, ReasonRegistrationCorrupt, ReasonRegistrationCorrupt)
	// A local rotation stays the deciding reason when the control plane is
	// ahead too.
	add("machine crash and control plane ahead", factsWith(PhaseRunning, FsyncPeriodic, func(f *Facts) {
		f.CurrentBootID = bootB
		f.ControlPlane = known(9)
	}), New, ReasonUncleanBootChanged, ReasonControlPlaneAhead)

	// Row: directory wiped / volume replaced: no file, new. Also after a
	// restore point deleted it, with everything else intact.
	add("wiped directory", Facts{CurrentBootID: bootA, SyncFSOK: true}, New, ReasonStorageIDMissing, nc)
	add("wiped directory, control plane knows node", Facts{CurrentBootID: bootA, SyncFSOK: true, ControlPlane: known(3)},
		New, ReasonStorageIDMissing, ReasonRegistrationMissing)
	add("storage-id deleted, rest intact", factsWith(PhaseCleanStop, FsyncOnCommit, func(f *Facts) { f.StorageID = FileMissing }),
		New, ReasonStorageIDMissing, nc)
	// Corrupt storage-id: new [ID-1].
	add("corrupt storage-id", factsWith(PhaseCleanStop, FsyncOnCommit, func(f *Facts) { f.StorageID = FileCorrupt }),
		New, ReasonStorageIDCorrupt, nc)
	// Corrupt or missing run-state: how the last run ended is unknown:
	// rotate, under every mode. Under OnCommit too: the mode is inside the
	// unreadable record, and a new id only claims less.
	for _, m := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone} {
		add("corrupt run-state/"+m.String(), factsWith(PhaseCleanStop, m, func(f *Facts) {
			f.RunState, f.Run = FileCorrupt, RunState{}
		}), New, ReasonRunStateCorrupt, nc)
	}
	add("missing run-state", factsWith(PhaseCleanStop, FsyncOnCommit, func(f *Facts) {
		f.RunState, f.Run = FileMissing, RunState{}
	}), New, ReasonRunStateMissing, nc)
	// A "valid" record with out-of-range fields (only a caller building
	// Facts by hand can produce one) is treated as corrupt.
	add("run-state with invalid phase", factsWith(PhaseCleanStop, FsyncOnCommit, func(f *Facts) { f.Run.Phase = 0 }),
		New, ReasonRunStateCorrupt, nc)
	add("run-state with invalid mode", factsWith(PhaseRunning, FsyncOnCommit, func(f *Facts) { f.Run.Fsync = 0 }),
		New, ReasonRunStateCorrupt, nc)

	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			got := Decide(r.facts)
			if got.Action != r.action || got.Reason != r.reason || got.Incarnation != r.inc {
				t.Fatalf("Decide = {%v %v local=%v inc=%v}, want {%v %v inc=%v}",
					got.Action, got.Reason, got.Local, got.Incarnation, r.action, r.reason, r.inc)
			}
			if rotates(got.Reason) != (got.Action == New) {
				t.Fatalf("reason %v disagrees with action %v", got.Reason, got.Action)
			}
			if again := Decide(r.facts); again != got {
				t.Fatalf("Decide is not deterministic: %+v then %+v", got, again)
			}
		})
	}
}

// TestID3_DecisionLeansToRotate checks the direction of every rule: making
// any single fact less certain never turns a New into a Keep.
func TestID3_DecisionLeansToRotate(t *testing.T) {
	weaken := []func(*Facts){
		func(f *Facts) { f.StorageID = FileCorrupt },
		func(f *Facts) { f.StorageID = FileMissing },
		func(f *Facts) { f.RunState = FileCorrupt },
		func(f *Facts) { f.RunState = FileMissing },
		func(f *Facts) { f.CurrentBootID = "" },
		func(f *Facts) { f.Run.BootID = "" },
		func(f *Facts) { f.SyncFSOK = false },
		func(f *Facts) { f.Registration = FileCorrupt },
		func(f *Facts) { f.Registration = FileMissing },
		func(f *Facts) { f.Run.Phase = PhaseRunning },
	}
	cps := []ControlPlane{{}, {State: ControlPlaneNoRecord}, known(4), known(5), known(6)}
	checked := 0
	for _, m := range []FsyncMode{FsyncOnCommit, FsyncPeriodic, FsyncNone} {
		for _, p := range []RunPhase{PhaseRunning, PhaseCleanStop} {
			for _, cp := range cps {
				base := factsWith(p, m, func(f *Facts) { f.ControlPlane = cp })
				if Decide(base).Action == Keep {
					continue
				}
				for i, w := range weaken {
					f := base
					w(&f)
					checked++
					if got := Decide(f); got.Action != New {
						t.Errorf("mode %v phase %v cp %+v: weakening %d turned New into %v (%v)", m, p, cp, i, got.Action, got.Reason)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no rotating base case was exercised")
	}
}

func TestReasonStringsAreStableAndUnique(t *testing.T) {
	seen := map[string]Reason{}
	for _, r := range Reasons() {
		s := r.String()
		if s == "" || s == "none" {
			t.Fatalf("reason %d has no name", uint8(r))
		}
		if prev, dup := seen[s]; dup {
			t.Fatalf("reasons %d and %d share name %q", uint8(prev), uint8(r), s)
		}
		seen[s] = r
	}
	if got := ReasonControlPlaneAhead.String(); got != "control_plane_ahead" {
		t.Fatalf("ReasonControlPlaneAhead = %q", got)
	}
}
