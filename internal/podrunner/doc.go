// Package podrunner is a stand-in for the kubelet of one local node, so the
// whole of Felix (API server, operator, broker pods) runs on one machine
// without a Kubernetes cluster. It talks to a real API server.
//
// Which pods: every pod in Config.Namespaces (all namespaces when empty)
// matching Config.Selector (all when nil) whose spec.nodeName is empty (the
// runner binds it to its node through the binding subresource, as a
// scheduler would) or equals Config.NodeName. It registers that Node.
//
// What it does for such a pod:
//   - gives it an address 127.0.0.x from Config.Addresses (in bridge
//     container mode, an address of the Docker network's subnet), stable
//     per namespace/name, reported as status.podIP;
//   - maps every PersistentVolumeClaim to the directory
//     StateDir/pvc/<namespace>/<claim> (emptyDir, configMap and secret
//     volumes to directories under StateDir/pods/<namespace>/<pod>);
//   - runs init containers in order to completion, then every container, as
//     local processes of the binary Config.Images maps the image to;
//   - resolves env as the kubelet does (envFrom, env, $(VAR) expansion,
//     downward-API fieldRefs, ConfigMap and Secret keys) and rewrites the
//     command line and env values (see Rewriter): a mount path prefix
//     becomes the host directory, a listen address ":port" or
//     "0.0.0.0:port" becomes "<podIP>:port", and the pod's own DNS name
//     <hostname>.<subdomain>.<namespace>.svc becomes the pod IP;
//   - probes readiness and liveness (HTTP GET and TCP) on the pod IP and
//     reports status: phase, podIP, container states, restart counts and
//     the Ready condition;
//   - restarts exited containers per restartPolicy with exponential
//     backoff, and restarts a container whose liveness probe fails;
//   - on deletion sends SIGTERM, then SIGKILL after the grace period, and
//     deletes the pod object with grace 0 once every process has exited.
//
// It also binds every claim in its namespaces (status.phase=Bound), copying
// a VolumeSnapshot's content first when the claim's dataSource is one
// (Config.Snapshots), plays the pvc-protection controller, and plays the
// garbage collector for its pods and claims (deleted once all their owners
// are gone). Output goes to StateDir/logs/<namespace>/<pod>.log.
//
// Kill, Freeze, Thaw and WipeVolume inject faults for end-to-end tests, and
// in bridge container mode (Config.Docker.Network) Partition and Heal cut
// a pod off the network and connect it again. With Config.PowerLoss
// (process mode) claims are power-loss file systems (internal/powerfs) and
// PowerCut cuts the power of a pod's machine.
// docs/local-cluster.md describes what is and is not emulated.
package podrunner
