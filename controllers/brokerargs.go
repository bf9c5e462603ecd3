package controllers

import felixv1 "felix.dev/felix/api/v1alpha1"

// BrokerArgs returns the arguments (after the binary) the operator gives
// the broker pods of c: `broker --cluster ... --advertise $(POD_IP):7100
// ...`, with `$(VAR)` expanded by Kubernetes from the pod's environment.
// docs/operator.md shows this command line; a test in cmd/felix holds the
// two together.
func BrokerArgs(c *felixv1.FelixCluster) []string { return brokerArgs(c) }
