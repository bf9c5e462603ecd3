package podrunner

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// errConfig marks a container whose configuration cannot be resolved (a
// missing ConfigMap key, an unsupported field): the kubelet's
// CreateContainerConfigError.
var errConfig = errors.New("container config")

// envVars is an ordered environment: later entries override earlier ones.
type envVars struct {
	names  []string
	values map[string]string
}

func (e *envVars) set(name, value string) {
	if e.values == nil {
		e.values = map[string]string{}
	}
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

func (e *envVars) lookup(name string) (string, bool) {
	v, ok := e.values[name]
	return v, ok
}

// list returns NAME=value pairs in definition order.
func (e *envVars) list() []string {
	out := make([]string, 0, len(e.names))
	for _, n := range e.names {
		out = append(out, n+"="+e.values[n])
	}
	return out
}

// resolveEnv computes a container's environment as the kubelet does:
// envFrom sources in order, then env entries in order, each value expanded
// against the variables defined before it. Downward-API fieldRefs, and
// ConfigMap and Secret references read through reader, are resolved.
func resolveEnv(ctx context.Context, reader client.Reader, pod *corev1.Pod, c *corev1.Container, ip netip.Addr, node, host string) (*envVars, error) {
	env := &envVars{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			var cm corev1.ConfigMap
			err := reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: from.ConfigMapRef.Name}, &cm)
			if err != nil {
				if apierrors.IsNotFound(err) && optional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("%w: envFrom configmap %s: %w", errConfig, from.ConfigMapRef.Name, err)
			}
			for k, v := range cm.Data {
				env.set(from.Prefix+k, v)
			}
		case from.SecretRef != nil:
			var s corev1.Secret
			err := reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: from.SecretRef.Name}, &s)
			if err != nil {
				if apierrors.IsNotFound(err) && optional(from.SecretRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("%w: envFrom secret %s: %w", errConfig, from.SecretRef.Name, err)
			}
			for k, v := range s.Data {
				env.set(from.Prefix+k, string(v))
			}
		}
	}
	for _, ev := range c.Env {
		if ev.ValueFrom == nil {
			env.set(ev.Name, ExpandVars(ev.Value, env.lookup))
			continue
		}
		v, ok, err := valueFrom(ctx, reader, pod, ev.ValueFrom, ip, node, host)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", ev.Name, err)
		}
		if ok {
			env.set(ev.Name, v)
		}
	}
	return env, nil
}

func optional(p *bool) bool { return p != nil && *p }

// valueFrom resolves one env valueFrom; ok is false for a missing optional
// reference (the variable is then not set).
func valueFrom(ctx context.Context, reader client.Reader, pod *corev1.Pod, src *corev1.EnvVarSource, ip netip.Addr, node, host string) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := fieldValue(pod, src.FieldRef.FieldPath, ip, node, host)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		var cm corev1.ConfigMap
		if err := reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, &cm); err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("%w: configmap %s: %w", errConfig, ref.Name, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok && !optional(ref.Optional) {
			return "", false, fmt.Errorf("%w: configmap %s has no key %q", errConfig, ref.Name, ref.Key)
		}
		return v, ok, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		var s corev1.Secret
		if err := reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, &s); err != nil {
			if apierrors.IsNotFound(err) && optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("%w: secret %s: %w", errConfig, ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok && !optional(ref.Optional) {
			return "", false, fmt.Errorf("%w: secret %s has no key %q", errConfig, ref.Name, ref.Key)
		}
		return string(v), ok, nil
	default:
		return "", false, fmt.Errorf("%w: unsupported env source (only fieldRef, configMapKeyRef, secretKeyRef)", errConfig)
	}
}

// fieldValue resolves a downward-API field path of pod.
func fieldValue(pod *corev1.Pod, path string, ip netip.Addr, node, host string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return node, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return ip.String(), nil
	case "status.hostIP", "status.hostIPs":
		return host, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[path[len(prefix)+2:len(path)-2]], nil
		}
	}
	return "", fmt.Errorf("%w: unsupported fieldRef %q", errConfig, path)
}

// hostIP is the address of the "node" outside bridge mode: the host's own
// loopback address.
const hostIP = "127.0.0.1"
