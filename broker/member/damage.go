package member

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/datadir"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

// LastRunOf tells the log store what the previous run left on disk, from
// the local rules of the storage-identity decision [ID-3] (the run-state
// record and its fsync mode): a clean stop, or an unclean one under
// periodic or none on the same boot with syncfs succeeding, left every
// write on disk; an unclean stop under on-commit left every acknowledged
// one; after any other start the id rotated (or the directory is new), so
// a lost tail claims nothing and is dropped.
func LastRunOf(d datadir.Decision) logstore.LastRun {
	switch d.Local {
	case datadir.ReasonCleanStop, datadir.ReasonUncleanSameBootSynced:
		return logstore.LastRunComplete
	case datadir.ReasonUncleanOnCommit:
		return logstore.LastRunAcknowledgedDurable
	}
	return logstore.LastRunUnknown
}

// giveUpDamaged handles damage to acknowledged data found when the store
// opened, before anything is served: the broker gives up its claim to
// what the directory holds, as a storage-id rotation does [ID-3]. It
// writes a new storage id (unless this start made one already), empties
// every damaged log (so it is copied again from the leader, as after a
// wipe), registers the new id and records the grant, and returns the id
// and incarnation to serve under. Leaders that see the new id forget what
// they believed this broker held and start it over from the shard's base
// [RP-1]; placement stops counting its reports under the old id [CP-1].
func giveUpDamaged(ctx context.Context, log logr.Logger, store *logstore.Store, running *datadir.Running,
	damaged []*record.CorruptError, inc int64, register func(context.Context, datadir.StorageID) (int64, error)) (datadir.StorageID, int64, error) {
	old := running.StorageID()
	id, rotated, err := running.RotateForDamage()
	if err != nil {
		return datadir.StorageID{}, 0, err
	}
	for _, d := range damaged {
		log.Error(d, "log store: acknowledged data is damaged; this broker gives up its copy: storage id rotated, log emptied, to be copied again from its peers",
			"log", d.Log.String(), "offset", d.Offset, "oldStorageID", old.String(), "storageID", id.String())
		l, err := store.Log(d.Log)
		if err != nil {
			return datadir.StorageID{}, 0, err
		}
		if err := l.ResetAt(l.Describe().Base); err != nil {
			return datadir.StorageID{}, 0, fmt.Errorf("member: empty damaged log %s: %w", d.Log, err)
		}
	}
	if !rotated {
		// This start made the id already: it was registered as new, and
		// nobody counts anything under it.
		return id, inc, nil
	}
	inc, err = register(ctx, id)
	if err != nil {
		return datadir.StorageID{}, 0, fmt.Errorf("member: register the rotated storage id: %w", err)
	}
	if err := running.RecordReRegistration(datadir.Incarnation(inc)); err != nil {
		return datadir.StorageID{}, 0, err
	}
	log.Info("registered the rotated storage id", "storageID", id.String(), "incarnation", inc)
	return id, inc, nil
}
