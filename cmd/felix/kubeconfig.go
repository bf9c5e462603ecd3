package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/pki"
)

// clusterFlagHelp is --cluster's help on the client commands, which also
// resolve the cluster's brokers through the kubeconfig.
const clusterFlagHelp = "FelixCluster NAME (namespace: -n, else the kubeconfig context's, else default) or NAMESPACE/NAME: " +
	"the broker must be a broker of this cluster (implies TLS; default: the client certificate's own cluster). " +
	"Without --broker, --bootstrap and " + envBootstrap + ", the bootstrap addresses are read through the kubeconfig: " +
	"the client Service's LoadBalancer ingress, then the addresses ready FelixBrokers advertise (pod IPs, reachable only from inside the cluster network)"

// Errors of the kubeconfig flags and of resolving a cluster through the
// API server.
var (
	// errKubeFlagsNeedCluster: -n, --kubeconfig or --context without
	// --cluster, which they would have nothing to apply to.
	errKubeFlagsNeedCluster = errors.New("--namespace, --kubeconfig and --context apply to --cluster only")
	// errNamespaceConflict: -n names another namespace than --cluster
	// NAMESPACE/NAME.
	errNamespaceConflict = errors.New("--namespace disagrees with the namespace of --cluster NAMESPACE/NAME")
	// errClusterNotFound: the API server has no such FelixCluster.
	errClusterNotFound = errors.New("FelixCluster not found")
	// errForbidden: the kubeconfig's user may not read what resolving
	// needs.
	errForbidden = errors.New("forbidden")
	// errNoReadyBrokers: no broker of the cluster is Up, registered and
	// advertising a client address.
	errNoReadyBrokers = errors.New("no ready broker advertises a client address")
	// errKubeconfig: the kubeconfig does not load.
	errKubeconfig = errors.New("kubeconfig")
)

// Reasons of a clusterLookupError, its JSON "reason".
const (
	lookupNotFound       = "NotFound"
	lookupForbidden      = "Forbidden"
	lookupNoReadyBrokers = "NoReadyBrokers"
	lookupKubeconfig     = "Kubeconfig"
	lookupAPI            = "APIError"
)

// errNameClusterLookup is the CLI-only error name of a failed lookup of
// the cluster's bootstrap addresses through the kubeconfig.
const errNameClusterLookup = "ClusterLookup"

// clusterLookupError is a failed resolution of --cluster through the
// kubeconfig; reason is one of the lookup* constants.
type clusterLookupError struct {
	reason string
	err    error
}

func (e *clusterLookupError) Error() string { return e.err.Error() }
func (e *clusterLookupError) Unwrap() error { return e.err }

// kubeFlags are the kubeconfig flags of the client commands: where the
// FelixCluster --cluster names is looked up.
type kubeFlags struct {
	kubeconfig string
	context    string
	namespace  string
	// open returns the kubeconfig of the flags; nil: clientcmd's loading
	// rules (openKubeconfig). Tests put their own here.
	open func(kubeFlags) kubeSource
}

func (k *kubeFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file --cluster is resolved through (default: $KUBECONFIG, else ~/.kube/config)")
	fl.StringVar(&k.context, "context", "", "kubeconfig context --cluster is resolved through (default: the current context)")
	fl.StringVarP(&k.namespace, "namespace", "n", "", "namespace of --cluster NAME (default: the kubeconfig context's, else default)")
}

// given reports whether any kubeconfig flag is set.
func (k *kubeFlags) given() bool {
	return k.kubeconfig != "" || k.context != "" || k.namespace != ""
}

func (k *kubeFlags) source() kubeSource {
	if k.open != nil {
		return k.open(*k)
	}
	return openKubeconfig(*k)
}

// kubeSource is a loaded kubeconfig: the context's namespace and a
// client of its API server.
type kubeSource interface {
	// Namespace is the context's namespace ("default" when it names none,
	// or when there is no kubeconfig).
	Namespace() (string, error)
	// Reader is a client of the API server that knows core and Felix kinds.
	Reader() (ctrlclient.Reader, error)
}

// clientcmdSource is a kubeSource through client-go's loading rules:
// --kubeconfig, else $KUBECONFIG, else ~/.kube/config; --context, else the
// current context.
type clientcmdSource struct{ cc clientcmd.ClientConfig }

// openKubeconfig returns the kubeconfig of k; nothing is read before
// it is used.
func openKubeconfig(k kubeFlags) kubeSource {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.context}
	return clientcmdSource{cc: clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)}
}

func (s clientcmdSource) Namespace() (string, error) {
	ns, _, err := s.cc.Namespace()
	if clientcmd.IsEmptyConfig(err) {
		// No kubeconfig at all: the namespace is default all the same.
		return "default", nil
	}
	if err != nil {
		return "", &clusterLookupError{reason: lookupKubeconfig, err: fmt.Errorf("%w: %w", errKubeconfig, err)}
	}
	if ns == "" {
		ns = "default"
	}
	return ns, nil
}

func (s clientcmdSource) Reader() (ctrlclient.Reader, error) {
	cfg, err := s.cc.ClientConfig()
	if err != nil {
		return nil, &clusterLookupError{reason: lookupKubeconfig, err: fmt.Errorf("%w: %w (give --kubeconfig, or the brokers with --bootstrap)", errKubeconfig, err)}
	}
	c, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: lookupScheme()})
	if err != nil {
		return nil, &clusterLookupError{reason: lookupKubeconfig, err: fmt.Errorf("%w: %w", errKubeconfig, err)}
	}
	return c, nil
}

// lookupScheme knows the kinds resolving a cluster reads: Services and
// the Felix kinds.
func lookupScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, felixv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// clusterRef names a FelixCluster.
type clusterRef struct {
	Namespace, Name string
}

// String is NAMESPACE/NAME, the form of pki.ParseClusterRef.
func (r clusterRef) String() string { return r.Namespace + "/" + r.Name }

// clusterRef resolves --cluster against -n and the kubeconfig: NAME takes
// -n, else the kubeconfig context's namespace, else default;
// NAMESPACE/NAME stands alone, and -n must then agree with it. Without
// --cluster it returns false (and the kubeconfig flags are an error).
// The kubeconfig is read only for NAME without -n.
func clusterRefOf(cluster string, k *kubeFlags) (clusterRef, bool, error) {
	if cluster == "" {
		if k.given() {
			return clusterRef{}, false, errKubeFlagsNeedCluster
		}
		return clusterRef{}, false, nil
	}
	if strings.Contains(cluster, "/") {
		ns, name, err := pki.ParseClusterRef(cluster)
		if err != nil {
			return clusterRef{}, false, fmt.Errorf("--cluster %q: want NAME or NAMESPACE/NAME: %w", cluster, err)
		}
		if k.namespace != "" && k.namespace != ns {
			return clusterRef{}, false, fmt.Errorf("--cluster %s with --namespace %s: %w", cluster, k.namespace, errNamespaceConflict)
		}
		return clusterRef{Namespace: ns, Name: name}, true, nil
	}
	ns := k.namespace
	if ns == "" {
		var err error
		if ns, err = k.source().Namespace(); err != nil {
			return clusterRef{}, false, err
		}
	}
	if _, _, err := pki.ParseClusterRef(ns + "/" + cluster); err != nil {
		return clusterRef{}, false, fmt.Errorf("--cluster %q in namespace %q: %w", cluster, ns, err)
	}
	return clusterRef{Namespace: ns, Name: cluster}, true, nil
}

// clusterBootstrap returns the bootstrap addresses of cluster ref, read
// from the API server, in this order:
//
//  1. the LoadBalancer ingress of the cluster's client Service (named like
//     the cluster) at its felix port, when it is a LoadBalancer that has
//     one: the addresses meant to be reached from outside the cluster;
//  2. the client addresses the cluster's ready FelixBrokers advertise
//     (status.address of those Up and registered), by ordinal: pod IPs,
//     reachable only from inside the cluster network.
//
// The client learns the cluster from the first that answers and then
// routes to the addresses the brokers advertise. Reading needs get on
// felixclusters and list on felixbrokers in the namespace; the Service
// is skipped when it is missing or may not be read. Errors are
// *clusterLookupError: the cluster not found, a forbidden read, no ready
// broker.
func clusterBootstrap(ctx context.Context, c ctrlclient.Reader, ref clusterRef) ([]string, error) {
	var fc felixv1.FelixCluster
	if err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &fc); err != nil {
		return nil, apiLookupErr(err, "get", "felixclusters.felix.dev", ref)
	}
	var out []string
	var svc corev1.Service
	switch err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: controllers.ClientServiceName(ref.Name)}, &svc); {
	case err == nil:
		out = append(out, loadBalancerAddrs(&svc)...)
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		// Optional: the brokers' own addresses follow.
	default:
		return nil, apiLookupErr(err, "get", "services", ref)
	}
	var brokers felixv1.FelixBrokerList
	if err := c.List(ctx, &brokers, ctrlclient.InNamespace(ref.Namespace)); err != nil {
		return nil, apiLookupErr(err, "list", "felixbrokers.felix.dev", ref)
	}
	var ready []felixv1.FelixBroker
	total := 0
	for _, b := range brokers.Items {
		if b.Spec.Cluster != ref.Name {
			continue
		}
		total++
		if b.Status.State == felixv1.BrokerUp && b.Status.Incarnation > 0 && b.Status.Address != "" {
			ready = append(ready, b)
		}
	}
	if len(ready) == 0 {
		return nil, &clusterLookupError{reason: lookupNoReadyBrokers,
			err: fmt.Errorf("FelixCluster %s: %w (%d FelixBrokers, none Up and registered with an address)", ref, errNoReadyBrokers, total)}
	}
	slices.SortFunc(ready, func(a, b felixv1.FelixBroker) int { return int(a.Spec.Ordinal) - int(b.Spec.Ordinal) })
	for _, b := range ready {
		if !slices.Contains(out, b.Status.Address) {
			out = append(out, b.Status.Address)
		}
	}
	return out, nil
}

// loadBalancerAddrs are the ingress addresses of a LoadBalancer Service
// at its felix port (the client port when it names none); none for other
// types or before the load balancer is provisioned.
func loadBalancerAddrs(svc *corev1.Service) []string {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	port := DefaultClientPort
	for _, p := range svc.Spec.Ports {
		if p.Name == "felix" {
			port = strconv.Itoa(int(p.Port))
		}
	}
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		host := in.IP
		if in.Hostname != "" {
			host = in.Hostname
		}
		if host != "" {
			out = append(out, net.JoinHostPort(host, port))
		}
	}
	return out
}

// apiLookupErr classifies err of reading resource for cluster ref.
func apiLookupErr(err error, verb, resource string, ref clusterRef) error {
	switch {
	case apierrors.IsNotFound(err) && resource == "felixclusters.felix.dev":
		return &clusterLookupError{reason: lookupNotFound,
			err: fmt.Errorf("%w: no FelixCluster %q in namespace %q (give -n NAMESPACE, or --bootstrap)", errClusterNotFound, ref.Name, ref.Namespace)}
	case apierrors.IsForbidden(err):
		return &clusterLookupError{reason: lookupForbidden,
			err: fmt.Errorf("%w: resolving --cluster %s needs %s on %s in namespace %q (or give --bootstrap): %w", errForbidden, ref, verb, resource, ref.Namespace, err)}
	default:
		return &clusterLookupError{reason: lookupAPI, err: fmt.Errorf("%s %s in namespace %q: %w", verb, resource, ref.Namespace, err)}
	}
}
