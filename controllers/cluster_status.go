package controllers

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// clusterObservation is what one FelixCluster reconcile saw and did; the
// status is a pure function of it, computed once per reconcile.
type clusterObservation struct {
	Desired int32
	// Brokers in the cluster's range (ordinal < Desired).
	Brokers []brokerObservation
	// Created counts objects created by this reconcile.
	Created int
	// Blocked maps a broker beyond the desired size to the shards it
	// still holds; scale-down waits for them to move.
	Blocked map[string][]string
	// Removing counts brokers beyond the desired size being removed.
	Removing int
	// Outdated counts broker pods whose spec differs from the cluster's;
	// RollWaiting is true while their replacement waits for every broker
	// to be ready.
	Outdated    int
	RollWaiting bool
	// RollStep says what the rolling update waits for before it replaces
	// the next pod (leaderships to move, shards to catch up), "" if
	// nothing.
	RollStep string
	// RestoreWaiting names the FelixBackup a restored cluster waits for
	// (missing or not Completed); its volumes and pods are not created.
	RestoreWaiting string
	// RestoreRefused says why a restored cluster takes nothing from its
	// backup (it recorded no shard epochs and no floor is set).
	RestoreRefused string
	// TLS is what the certificate step saw; TLSWaiting names the brokers
	// whose pod waits for its certificate Secret.
	TLS        tlsObservation
	TLSWaiting []string
	// ClaimWaiting maps a broker whose volume claim is being deleted to
	// why it waits: no pod is built on a terminating claim.
	ClaimWaiting map[string]claimWait
	// Storage is what the brokers' claims show against storage.size.
	Storage storageObservation
	// classes caches StorageClass lookups within the reconcile.
	classes map[string]expandable
}

// brokerObservation is one broker's registry entry as the cluster sees it.
type brokerObservation struct {
	Name        string
	State       felixv1.BrokerState
	Incarnation int64
	PodExists   bool
	PodReady    bool
	PodOutdated bool
}

// clusterStatus computes readyBrokers and the Ready, Progressing and
// Degraded conditions.
func clusterStatus(obs clusterObservation) (int32, []metav1.Condition) {
	var ready int32
	var down, unregistered []string
	for _, b := range obs.Brokers {
		switch {
		case b.State == felixv1.BrokerUp && b.Incarnation > 0:
			ready++
		case b.State == felixv1.BrokerDown && b.Incarnation > 0:
			down = append(down, b.Name)
		default:
			unregistered = append(unregistered, b.Name)
		}
	}
	missing := obs.Desired - int32(len(obs.Brokers))
	if missing < 0 {
		missing = 0
	}
	var conds []metav1.Condition
	if ready == obs.Desired && len(obs.Blocked) == 0 && obs.Removing == 0 {
		conds = append(conds, cond(felixv1.ConditionReady, true, "AllBrokersUp", fmt.Sprintf("%d/%d brokers registered and up", ready, obs.Desired)))
	} else {
		conds = append(conds, cond(felixv1.ConditionReady, false, "BrokersNotReady", fmt.Sprintf("%d/%d brokers registered and up", ready, obs.Desired)))
	}
	switch {
	case obs.RestoreRefused != "":
		conds = append(conds, cond(felixv1.ConditionProgressing, false, RestoreRefusedReason, obs.RestoreRefused))
	case obs.RestoreWaiting != "":
		conds = append(conds, cond(felixv1.ConditionProgressing, true, "WaitingForBackup", fmt.Sprintf("restore waits for FelixBackup %s to exist and complete", obs.RestoreWaiting)))
	case len(obs.ClaimWaiting) > 0:
		conds = append(conds, cond(felixv1.ConditionProgressing, true, WaitingForVolumeReason, claimWaitMessage(obs.ClaimWaiting)))
	case len(obs.TLSWaiting) > 0:
		conds = append(conds, cond(felixv1.ConditionProgressing, true, "WaitingForCertificates", "broker pods wait for their certificate Secrets: "+strings.Join(obs.TLSWaiting, ", ")))
	case obs.Created > 0 || missing > 0:
		conds = append(conds, cond(felixv1.ConditionProgressing, true, "CreatingBrokers", fmt.Sprintf("created %d objects; %d brokers missing", obs.Created, missing)))
	case obs.Removing > 0:
		conds = append(conds, cond(felixv1.ConditionProgressing, true, "RemovingBrokers", fmt.Sprintf("removing %d brokers", obs.Removing)))
	case obs.Outdated > 0:
		msg := fmt.Sprintf("rolling update: %d broker pods run an outdated spec; one is replaced at a time", obs.Outdated)
		if obs.RollWaiting {
			msg += ", once every broker pod is ready and the outdated brokers' certificates can be issued"
		}
		if obs.RollStep != "" {
			msg += "; " + obs.RollStep
		}
		conds = append(conds, cond(felixv1.ConditionProgressing, true, "RollingUpdate", msg))
	case len(unregistered) > 0:
		conds = append(conds, cond(felixv1.ConditionProgressing, true, "WaitingForRegistration", "waiting for brokers to start and register: "+strings.Join(unregistered, ", ")))
	case len(obs.Blocked) > 0:
		conds = append(conds, cond(felixv1.ConditionProgressing, false, "ScaleDownBlocked", blockedMessage(obs.Blocked)))
	default:
		conds = append(conds, cond(felixv1.ConditionProgressing, false, "Reconciled", "all brokers exist"))
	}
	switch {
	case obs.RestoreRefused != "":
		conds = append(conds, cond(felixv1.ConditionDegraded, true, RestoreRefusedReason, obs.RestoreRefused))
	case len(obs.Blocked) > 0:
		conds = append(conds, cond(felixv1.ConditionDegraded, true, "ScaleDownBlocked", blockedMessage(obs.Blocked)))
	case len(down) > 0:
		conds = append(conds, cond(felixv1.ConditionDegraded, true, "BrokersDown", "no heartbeat within the node expiry timeout: "+strings.Join(down, ", ")))
	default:
		conds = append(conds, cond(felixv1.ConditionDegraded, false, "AsExpected", "no broker is down"))
	}
	conds = append(conds, storageCondition(obs.Storage))
	if obs.TLS.Condition.Type != "" {
		conds = append(conds, obs.TLS.Condition)
	}
	return ready, conds
}

// blockedMessage says which brokers cannot be removed and why.
func blockedMessage(blocked map[string][]string) string {
	names := make([]string, 0, len(blocked))
	for n := range blocked {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		shards := blocked[n]
		list := strings.Join(shards[:min(len(shards), 3)], ", ")
		if len(shards) > 3 {
			list += fmt.Sprintf(" and %d more", len(shards)-3)
		}
		parts = append(parts, fmt.Sprintf("%s holds replicas of %d shards (%s)", n, len(shards), list))
	}
	return "scale-down waits: only brokers holding no shard replica are removed; " + strings.Join(parts, "; ")
}
