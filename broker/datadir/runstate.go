package datadir

import (
	"fmt"

	"felix.dev/felix/broker/record"
)

// RunStateFile is the name of the run-state file inside the data directory.
const RunStateFile = "run-state"

// runStateMagic heads the run-state file; /1 is the format version.
const runStateMagic = "felix-run-state/1"

// unknownBoot is how a run-state file records a boot id that could not be
// read when the record was written.
const unknownBoot = "-"

// FsyncMode is record.FsyncMode: one type for the mode the store applies
// and the run-state records.
type FsyncMode = record.FsyncMode

// The three modes (see record.FsyncMode).
const (
	FsyncOnCommit = record.FsyncOnCommit
	FsyncPeriodic = record.FsyncPeriodic
	FsyncNone     = record.FsyncNone
)

// ParseFsyncMode is record.ParseFsyncMode.
func ParseFsyncMode(s string) (FsyncMode, error) { return record.ParseFsyncMode(s) }

// RunPhase says whether the run that wrote a run-state record was still
// running or had stopped cleanly. The zero value is invalid.
type RunPhase uint8

const (
	// PhaseRunning is written after the startup decision, before any store
	// opens. Found at start, it means the last run did not stop cleanly.
	PhaseRunning RunPhase = iota + 1
	// PhaseCleanStop is written at graceful shutdown after every store has
	// been closed and synced.
	PhaseCleanStop
)

// String returns the spelling used in the run-state file: "running" or
// "clean-stop".
func (p RunPhase) String() string {
	switch p {
	case PhaseRunning:
		return "running"
	case PhaseCleanStop:
		return "clean-stop"
	}
	return fmt.Sprintf("RunPhase(%d)", uint8(p))
}

// RunState is the run-state record: the phase of the run that wrote it,
// the boot id it ran in ("" when the boot id could not be read), and its
// fsync mode.
type RunState struct {
	Phase  RunPhase
	BootID string
	Fsync  FsyncMode
}

// encodeRunStateFile renders the run-state file:
//
//	felix-run-state/1 phase=<running|clean-stop> boot=<uuid|-> fsync=<mode> crc32c=<8 hex>\n
func encodeRunStateFile(rs RunState) ([]byte, error) {
	if rs.Phase != PhaseRunning && rs.Phase != PhaseCleanStop {
		return nil, fmt.Errorf("datadir: run-state phase %v is invalid", rs.Phase)
	}
	if !rs.Fsync.Valid() {
		return nil, fmt.Errorf("datadir: run-state fsync mode %v is invalid", rs.Fsync)
	}
	boot := unknownBoot
	if rs.BootID != "" {
		if !validBootID(rs.BootID) {
			return nil, fmt.Errorf("datadir: run-state boot id %q is not a lowercase uuid", rs.BootID)
		}
		boot = rs.BootID
	}
	return encodeLine(runStateMagic, []field{
		{"phase", rs.Phase.String()},
		{"boot", boot},
		{"fsync", rs.Fsync.String()},
	}), nil
}

// decodeRunStateFile parses the run-state file strictly. Every failure
// wraps errCorruptFile.
func decodeRunStateFile(data []byte) (RunState, error) {
	v, err := decodeLine(runStateMagic, []string{"phase", "boot", "fsync"}, data)
	if err != nil {
		return RunState{}, fmt.Errorf("%s: %w", RunStateFile, err)
	}
	var rs RunState
	switch v[0] {
	case "running":
		rs.Phase = PhaseRunning
	case "clean-stop":
		rs.Phase = PhaseCleanStop
	default:
		return RunState{}, fmt.Errorf("%s: %w: phase %q", RunStateFile, errCorruptFile, v[0])
	}
	switch {
	case v[1] == unknownBoot:
	case validBootID(v[1]):
		rs.BootID = v[1]
	default:
		return RunState{}, fmt.Errorf("%s: %w: boot %q", RunStateFile, errCorruptFile, v[1])
	}
	switch v[2] {
	case "on-commit":
		rs.Fsync = FsyncOnCommit
	case "periodic":
		rs.Fsync = FsyncPeriodic
	case "none":
		rs.Fsync = FsyncNone
	default:
		return RunState{}, fmt.Errorf("%s: %w: fsync %q", RunStateFile, errCorruptFile, v[2])
	}
	return rs, nil
}
