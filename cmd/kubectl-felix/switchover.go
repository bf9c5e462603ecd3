package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

func newSwitchoverCmd(connect func() (*env, error)) *cobra.Command {
	var to string
	var clear bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "switchover SHARD --to BROKER | --clear",
		Short: "Move a shard's leadership to a caught-up replica (a planned promotion by the operator)",
		Long: `switchover sets the FelixShard's felix.dev/preferred-leader annotation to
BROKER, one of the shard's replicas. The operator moves leadership there
in a planned promotion at a new epoch once BROKER is up and the current
leader's fresh report counts it caught up under its registered storage id;
until then the leader stays. The annotation stays the shard's preferred
leader (over the cluster's leaderBalance) until --clear removes it, so
leadership returns to BROKER after a failover too.

With --wait (default 2m) the command waits for BROKER to lead and says why
it does not yet when the wait runs out (exit code 3).`,
		Example: `  kubectl felix switchover orders-0 --to orders-2
  kubectl felix switchover orders-0 --clear`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if clear == (to != "") {
				return usage("give exactly one of --to BROKER and --clear")
			}
			e, err := connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var sh felixv1.FelixShard
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: args[0]}, &sh); err != nil {
				return fmt.Errorf("FelixShard %s/%s: %w", e.ns, args[0], err)
			}
			if clear {
				if err := annotate(ctx, e, &sh, nil); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: preferred leader cleared; the cluster's leaderBalance applies again\n", sh.Name)
				return nil
			}
			if !slices.Contains(sh.Spec.Replicas, to) {
				return usage("%s is not a replica of %s (replicas: %s)", to, sh.Name, strings.Join(sh.Spec.Replicas, ", "))
			}
			if err := annotate(ctx, e, &sh, &to); err != nil {
				return err
			}
			if a := sh.Status.Assignment; a != nil && a.Leader == to {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s already leads at epoch %d; it stays the preferred leader\n", sh.Name, to, a.Epoch)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: asked the operator to move leadership to %s\n", sh.Name, to)
			if wait <= 0 {
				return nil
			}
			var last felixv1.FelixShard
			led, err := waitUntil(ctx, wait, func(ctx context.Context) (bool, error) {
				if err := e.c.Get(ctx, client.ObjectKeyFromObject(&sh), &last); err != nil {
					return false, err
				}
				a := last.Status.Assignment
				return a != nil && a.Leader == to, nil
			})
			if err != nil {
				return err
			}
			if !led {
				return &exitError{code: exitTimeout, err: fmt.Errorf("%s does not lead %s after %v: %s", to, sh.Name, wait, notYet(&last, to))}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s leads at epoch %d\n", sh.Name, to, last.Status.Assignment.Epoch)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the replica to lead the shard")
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the shard's preferred leader")
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the new leader (0: do not wait)")
	return cmd
}

// annotate sets (to != nil) or removes the preferred-leader annotation
// with a merge patch.
func annotate(ctx context.Context, e *env, sh *felixv1.FelixShard, to *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{felixv1.AnnotationPreferredLeader: to}}})
	if err != nil {
		return err
	}
	if err := e.c.Patch(ctx, sh, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("annotate FelixShard %s: %w", sh.Name, err)
	}
	return nil
}

// notYet says why to does not lead sh yet, from its status.
func notYet(sh *felixv1.FelixShard, to string) string {
	if c := apimeta.FindStatusCondition(sh.Status.Conditions, felixv1.ConditionWaiting); c != nil && c.Status == "True" {
		return "the shard waits: " + c.Message
	}
	rep := sh.Status.Report
	if rep == nil {
		return "the leader has not reported yet"
	}
	for _, f := range rep.Followers {
		if f.Name == to {
			if !f.CaughtUp {
				return fmt.Sprintf("the leader's report (taken %s) does not count %s caught up (confirmed %d of %d)",
					rep.TakenAt.UTC().Format(time.RFC3339), to, f.Confirmed, rep.Committed)
			}
			return fmt.Sprintf("the leader's report counts %s caught up under storage id %s; the operator has not acted yet (is %s up at that id?)", to, f.StorageID, to)
		}
	}
	return fmt.Sprintf("the leader's report does not name %s", to)
}
