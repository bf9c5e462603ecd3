package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

func newBackupCmd(connect func() (*env, error)) *cobra.Command {
	var name string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "backup CLUSTER [--name NAME] [--wait DURATION]",
		Short: "Take a backup of a FelixCluster: a FelixBackup, VolumeSnapshots of every broker volume",
		Long: `backup creates a FelixBackup of CLUSTER; the operator snapshots every broker
volume (docs/backup-restore.md). NAME defaults to CLUSTER-YYYYMMDDHHMMSS
(UTC). With --wait the command waits for the backup to complete and fails
(exit code 1) if it fails, or exit code 3 if the wait runs out.`,
		Example: `  kubectl felix backup orders
  kubectl felix backup orders --name before-upgrade --wait 10m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := connect()
			if err != nil {
				return err
			}
			ctx, cluster := cmd.Context(), args[0]
			var c felixv1.FelixCluster
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: cluster}, &c); err != nil {
				return fmt.Errorf("FelixCluster %s/%s: %w", e.ns, cluster, err)
			}
			if name == "" {
				name = cluster + "-" + e.clk.Now().UTC().Format("20060102150405")
			}
			b := &felixv1.FelixBackup{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Spec: felixv1.FelixBackupSpec{Cluster: cluster}}
			if err := e.c.Create(ctx, b); err != nil {
				return fmt.Errorf("create FelixBackup %s: %w", name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "felixbackup/%s created for cluster %s\n", name, cluster)
			if wait <= 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "watch it with: kubectl get felixbackup %s -n %s -w\n", name, e.ns)
				return nil
			}
			done, err := waitUntil(ctx, wait, func(ctx context.Context) (bool, error) {
				if err := e.c.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
					return false, err
				}
				return b.Status.Phase == felixv1.BackupCompleted || b.Status.Phase == felixv1.BackupFailed, nil
			})
			switch {
			case err != nil:
				return err
			case !done:
				return &exitError{code: exitTimeout, err: fmt.Errorf("felixbackup/%s is %s after %v", name, orDash(string(b.Status.Phase)), wait)}
			case b.Status.Phase == felixv1.BackupFailed:
				return &exitError{code: exitFailed, err: fmt.Errorf("felixbackup/%s failed: %s", name, conditionText(b.Status.Conditions, felixv1.ConditionReady))}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "felixbackup/%s completed: %d volume snapshots\n", name, len(b.Status.Snapshots))
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the FelixBackup's name (default CLUSTER-YYYYMMDDHHMMSS)")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait this long for the backup to complete (0: do not wait)")
	return cmd
}

func newRestoreCmd(connect func() (*env, error)) *cobra.Command {
	var to string
	var epochFloor int64
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "restore BACKUP --to NEW-CLUSTER [--epoch-floor N] [--dry-run]",
		Short: "Restore a FelixBackup into a new FelixCluster",
		Long: `restore creates the FelixCluster NEW-CLUSTER with the spec of the backup's
source cluster and spec.restore.backup = BACKUP: the operator creates each
broker's volume from the backup's snapshot of the same ordinal and runs
felix restore-point on it before the broker first starts, so every restored
broker gets a new storage id (docs/backup-restore.md). The source cluster
must still exist (its spec is the template); otherwise write the manifest
yourself, or start from --dry-run's.

--dry-run prints the FelixCluster as YAML instead of creating it. The
command lists the streams the backup recorded: create FelixStreams of the
same names for NEW-CLUSTER to serve their restored logs.`,
		Example: `  kubectl felix restore orders-20261202020000 --to orders-restored
  kubectl felix restore nightly --to orders-restored --dry-run > restored.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usage("--to NEW-CLUSTER is required")
			}
			e, err := connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var b felixv1.FelixBackup
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: args[0]}, &b); err != nil {
				return fmt.Errorf("FelixBackup %s/%s: %w", e.ns, args[0], err)
			}
			if b.Status.Phase == felixv1.BackupFailed {
				return fmt.Errorf("felixbackup/%s failed: it cannot be restored", b.Name)
			}
			var src felixv1.FelixCluster
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: b.Spec.Cluster}, &src); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("the backup's cluster %s is gone, so there is no spec to copy: write a FelixCluster with spec.restore.backup: %s (docs/backup-restore.md)", b.Spec.Cluster, b.Name)
				}
				return err
			}
			if b.Status.Epochs == nil && epochFloor == 0 {
				return usage("felixbackup/%s recorded no shard epochs (an older operator took it): give --epoch-floor, at least the highest epoch any shard of %s reached", b.Name, b.Spec.Cluster)
			}
			nc := &felixv1.FelixCluster{
				TypeMeta:   metav1.TypeMeta{APIVersion: felixv1.GroupVersion.String(), Kind: "FelixCluster"},
				ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: to},
				Spec:       *src.Spec.DeepCopy(),
			}
			nc.Spec.Restore = &felixv1.RestoreSpec{Backup: b.Name, EpochFloor: epochFloor}
			if dryRun {
				out, err := yaml.Marshal(nc)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			if err := e.c.Create(ctx, nc); err != nil {
				return fmt.Errorf("create FelixCluster %s: %w", to, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "felixcluster/%s created from felixbackup/%s (phase %s); its brokers start once the backup is Completed\n",
				to, b.Name, orDash(string(b.Status.Phase)))
			writeRecordedStreams(cmd.OutOrStdout(), &b, to)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "name of the new FelixCluster (required)")
	cmd.Flags().Int64Var(&epochFloor, "epoch-floor", 0, "spec.restore.epochFloor: needed only for a backup without recorded epochs")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the FelixCluster instead of creating it")
	return cmd
}

// writeRecordedStreams lists the streams a backup recorded epochs for,
// with their shard counts, as the FelixStreams to create.
func writeRecordedStreams(w io.Writer, b *felixv1.FelixBackup, cluster string) {
	if b.Status.Epochs == nil || len(b.Status.Epochs.Shards) == 0 {
		return
	}
	shards := map[string]int32{}
	for _, s := range b.Status.Epochs.Shards {
		shards[s.Stream] = max(shards[s.Stream], s.Index+1)
	}
	names := make([]string, 0, len(shards))
	for n := range shards {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "streams the backup recorded (create FelixStreams of these names with spec.cluster: %s):\n", cluster)
	for _, n := range names {
		fmt.Fprintf(w, "  %s: %d shards\n", n, shards[n])
	}
}
