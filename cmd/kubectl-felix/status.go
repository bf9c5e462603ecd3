package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// defaultEvents is how many recent events status shows.
const defaultEvents = 10

// clusterView is everything status shows of one cluster, read once.
type clusterView struct {
	cluster *felixv1.FelixCluster
	brokers []felixv1.FelixBroker
	streams []felixv1.FelixStream
	shards  []felixv1.FelixShard
	events  []eventsv1.Event
}

func newStatusCmd(connect func() (*env, error)) *cobra.Command {
	var events int
	cmd := &cobra.Command{
		Use:   "status [CLUSTER]",
		Short: "One screen of a FelixCluster: brokers, shards, consumer groups, waiting shards and recent events",
		Long: `status shows, for the named FelixCluster (or every one in the namespace):
its readiness and spec in brief; each broker's state, incarnation and
storage id; each shard's leader, epoch and caught-up count, and whether it
serves; each shard's consumer groups with their lag, as of the leader's
last report (its age is shown; the live lag is the broker's metric or
felix groups); why each waiting shard waits (the verdict per replica, as
the operator wrote it); and the most recent events of the cluster's
objects.`,
		Example: `  kubectl felix status
  kubectl felix status orders -n prod --events 20`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := connect()
			if err != nil {
				return err
			}
			names := args
			if len(names) == 0 {
				var list felixv1.FelixClusterList
				if err := e.c.List(cmd.Context(), &list, client.InNamespace(e.ns)); err != nil {
					return err
				}
				for _, c := range list.Items {
					names = append(names, c.Name)
				}
				if len(names) == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "No FelixCluster in namespace %s.\n", e.ns)
					return nil
				}
			}
			for i, name := range names {
				v, err := readCluster(cmd.Context(), e, name)
				if err != nil {
					return err
				}
				if i > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				if err := v.render(cmd.OutOrStdout(), e.clk.Now(), events); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&events, "events", defaultEvents, "how many recent events to show (0: none)")
	return cmd
}

// readCluster reads a cluster and what belongs to it.
func readCluster(ctx context.Context, e *env, name string) (*clusterView, error) {
	v := &clusterView{cluster: &felixv1.FelixCluster{}}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, v.cluster); err != nil {
		return nil, fmt.Errorf("FelixCluster %s/%s: %w", e.ns, name, err)
	}
	var brokers felixv1.FelixBrokerList
	if err := e.c.List(ctx, &brokers, client.InNamespace(e.ns)); err != nil {
		return nil, err
	}
	for _, b := range brokers.Items {
		if b.Spec.Cluster == name {
			v.brokers = append(v.brokers, b)
		}
	}
	var streams felixv1.FelixStreamList
	if err := e.c.List(ctx, &streams, client.InNamespace(e.ns)); err != nil {
		return nil, err
	}
	mine := map[string]bool{}
	for _, s := range streams.Items {
		if s.Spec.Cluster == name {
			v.streams = append(v.streams, s)
			mine[s.Name] = true
		}
	}
	shards, err := listShards(ctx, e, "")
	if err != nil {
		return nil, err
	}
	for _, sh := range shards {
		if mine[sh.Spec.Stream] {
			v.shards = append(v.shards, sh)
		}
	}
	var evs eventsv1.EventList
	if err := e.c.List(ctx, &evs, client.InNamespace(e.ns)); err != nil {
		return nil, err
	}
	owned := map[string]bool{"FelixCluster/" + name: true}
	for _, b := range v.brokers {
		owned["FelixBroker/"+b.Name] = true
	}
	for _, s := range v.streams {
		owned["FelixStream/"+s.Name] = true
	}
	for _, sh := range v.shards {
		owned["FelixShard/"+sh.Name] = true
	}
	for _, ev := range evs.Items {
		if owned[ev.Regarding.Kind+"/"+ev.Regarding.Name] {
			v.events = append(v.events, ev)
		}
	}
	sort.SliceStable(v.events, func(i, j int) bool { return eventTime(&v.events[i]).Before(eventTime(&v.events[j])) })
	return v, nil
}

// listShards lists the namespace's FelixShards (of stream, when given)
// sorted by stream and index.
func listShards(ctx context.Context, e *env, stream string) ([]felixv1.FelixShard, error) {
	var list felixv1.FelixShardList
	if err := e.c.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, sh := range list.Items {
		if stream == "" || sh.Spec.Stream == stream {
			out = append(out, sh)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Spec.Stream != out[j].Spec.Stream {
			return out[i].Spec.Stream < out[j].Spec.Stream
		}
		return out[i].Spec.Index < out[j].Spec.Index
	})
	return out, nil
}

// eventTime is when an event last happened.
func eventTime(ev *eventsv1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.DeprecatedLastTimestamp.IsZero():
		return ev.DeprecatedLastTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}

// render writes the view; ages are taken against now.
func (v *clusterView) render(w io.Writer, now time.Time, events int) error {
	c := v.cluster
	up := 0
	for _, b := range v.brokers {
		if b.Status.State == felixv1.BrokerUp {
			up++
		}
	}
	serving, waiting := 0, []felixv1.FelixShard{}
	for _, sh := range v.shards {
		if isTrue(sh.Status.Conditions, felixv1.ConditionReady) {
			serving++
		}
		if isTrue(sh.Status.Conditions, felixv1.ConditionWaiting) {
			waiting = append(waiting, sh)
		}
	}
	fmt.Fprintf(w, "Cluster:   %s (namespace %s)\n", c.Name, c.Namespace)
	fmt.Fprintf(w, "Ready:     %s\n", conditionText(c.Status.Conditions, felixv1.ConditionReady))
	if p := apimeta.FindStatusCondition(c.Status.Conditions, felixv1.ConditionProgressing); p != nil && p.Status == metav1.ConditionTrue {
		fmt.Fprintf(w, "Progress:  %s: %s\n", p.Reason, p.Message)
	}
	fmt.Fprintf(w, "Brokers:   %d ready of %d; %d registered Up\n", c.Status.ReadyBrokers, c.Spec.Brokers, up)
	fmt.Fprintf(w, "Streams:   %d, %d shards: %d serving, %d waiting\n", len(v.streams), len(v.shards), serving, len(waiting))
	fmt.Fprintf(w, "Fsync:     %s\n", orDash(string(c.Spec.Durability.Fsync)))
	fmt.Fprintf(w, "Image:     %s\n", orDash(c.Status.Image))
	if r := c.Spec.Restore; r != nil {
		fmt.Fprintf(w, "Restored:  from FelixBackup %s\n", r.Backup)
	}

	fmt.Fprintln(w, "\nBrokers")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tINCARNATION\tSTORAGE ID\tADDRESS")
	for _, b := range v.brokers {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", b.Name, orDash(string(b.Status.State)), b.Status.Incarnation,
			orDash(b.Status.StorageID), orDash(b.Status.Address))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nShards")
	if err := writeShards(w, v.shards); err != nil {
		return err
	}
	if hasGroups(v.shards) {
		fmt.Fprintln(w, "\nConsumer groups (lag as of each leader's last report; live: felix groups)")
		if err := writeGroups(w, now, v.shards); err != nil {
			return err
		}
	}
	if len(waiting) > 0 {
		fmt.Fprintln(w, "\nWaiting shards")
		for _, sh := range waiting {
			cond := apimeta.FindStatusCondition(sh.Status.Conditions, felixv1.ConditionWaiting)
			fmt.Fprintf(w, "  %s: %s: %s\n", sh.Name, cond.Reason, cond.Message)
		}
	}
	if events > 0 && len(v.events) > 0 {
		fmt.Fprintln(w, "\nRecent events")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AGE\tTYPE\tREASON\tOBJECT\tMESSAGE")
		evs := v.events[max(0, len(v.events)-events):]
		for i := range evs {
			ev := &evs[i]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\n", age(now, eventTime(ev)), ev.Type, ev.Reason,
				strings.ToLower(ev.Regarding.Kind), ev.Regarding.Name, ev.Note)
		}
		return tw.Flush()
	}
	return nil
}

// writeShards writes the shard table of status and shards.
func writeShards(w io.Writer, shards []felixv1.FelixShard) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSTREAM\tINDEX\tLEADER\tEPOCH\tCAUGHT UP\tSTATE\tPREFERRED")
	for _, sh := range shards {
		leader, epoch := "-", "-"
		if a := sh.Status.Assignment; a != nil {
			leader, epoch = a.Leader, fmt.Sprint(a.Epoch)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", sh.Name, sh.Spec.Stream, sh.Spec.Index, leader, epoch,
			orDash(sh.Status.CaughtUp), shardState(&sh), orDash(sh.Annotations[felixv1.AnnotationPreferredLeader]))
	}
	return tw.Flush()
}

// shardState is Serving, Waiting (reason) or Not serving (reason).
func shardState(sh *felixv1.FelixShard) string {
	if c := apimeta.FindStatusCondition(sh.Status.Conditions, felixv1.ConditionWaiting); c != nil && c.Status == metav1.ConditionTrue {
		return "Waiting (" + c.Reason + ")"
	}
	c := apimeta.FindStatusCondition(sh.Status.Conditions, felixv1.ConditionReady)
	switch {
	case c == nil:
		return "Pending"
	case c.Status == metav1.ConditionTrue:
		return "Serving"
	}
	return "Not serving (" + c.Reason + ")"
}

func isTrue(conds []metav1.Condition, t string) bool {
	return apimeta.IsStatusConditionTrue(conds, t)
}

// conditionText renders a condition as "True (Reason: message)".
func conditionText(conds []metav1.Condition, t string) string {
	c := apimeta.FindStatusCondition(conds, t)
	if c == nil {
		return "Unknown (no " + t + " condition yet)"
	}
	if c.Message == "" {
		return fmt.Sprintf("%s (%s)", c.Status, c.Reason)
	}
	return fmt.Sprintf("%s (%s: %s)", c.Status, c.Reason, c.Message)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age renders now-t the way kubectl does, coarsely.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}
