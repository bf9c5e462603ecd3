package podrunner

import (
	"net/netip"
	"regexp"
	"sort"
	"strings"
)

// ExpandVars expands Kubernetes dependent-variable references in s the way
// the kubelet does for command, args and env values: $(NAME) becomes the
// value of NAME when lookup knows it and stays as written otherwise, and
// $$ is an escaped $ (so $$(NAME) stays the literal "$(NAME)").
func ExpandVars(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Mount maps a container path to the host directory standing in for it.
type Mount struct {
	// ContainerPath is the volume's mountPath in the pod spec.
	ContainerPath string
	// HostPath is the directory the runner gives the process instead.
	HostPath string
}

// Rewriter turns a container's view of paths and addresses into the host's:
// processes cannot mount volumes or own an address, so the runner edits
// their command line and environment instead. It is the volume and address
// contract of the runner (see docs/local-cluster.md).
type Rewriter struct {
	mounts []Mount
	ip     string
	names  []string
}

// NewRewriter returns a Rewriter for a pod with the given mounts, pod IP and
// own host names (names the pod's DNS would give it, e.g.
// <hostname>.<subdomain>.<namespace>.svc); every name is replaced by ip.
func NewRewriter(mounts []Mount, ip netip.Addr, names []string) *Rewriter {
	ms := append([]Mount(nil), mounts...)
	for i := range ms {
		ms[i].ContainerPath = strings.TrimRight(ms[i].ContainerPath, "/")
	}
	// Longest container path first, so /data/sub wins over /data.
	sort.SliceStable(ms, func(i, j int) bool { return len(ms[i].ContainerPath) > len(ms[j].ContainerPath) })
	ns := append([]string(nil), names...)
	sort.SliceStable(ns, func(i, j int) bool { return len(ns[i]) > len(ns[j]) })
	return &Rewriter{mounts: ms, ip: ip.String(), names: ns}
}

// wildcardListen matches a listen address whose host is empty or a
// wildcard: ":7100", "0.0.0.0:7100", "[::]:7100".
var wildcardListen = regexp.MustCompile(`^(|0\.0\.0\.0|\[::\]|\*):([0-9]{1,5})$`)

// Rewrite rewrites one argument or environment value. The value, or the
// part after the first '=' of a "--flag=value" argument, is rewritten when
// it is
//   - a path equal to a mount's container path or below it: the container
//     path prefix is replaced by the host directory;
//   - a listen address with an empty or wildcard host (":7100",
//     "0.0.0.0:7100", "[::]:7100"): the host becomes the pod IP;
//   - or it contains one of the pod's own DNS names: each becomes the pod IP.
//
// Other values are returned unchanged.
func (r *Rewriter) Rewrite(v string) string {
	if i := strings.IndexByte(v, '='); i > 0 && strings.HasPrefix(v, "-") {
		return v[:i+1] + r.rewriteValue(v[i+1:])
	}
	return r.rewriteValue(v)
}

func (r *Rewriter) rewriteValue(v string) string {
	for _, m := range r.mounts {
		if m.ContainerPath == "" {
			continue
		}
		if v == m.ContainerPath || strings.HasPrefix(v, m.ContainerPath+"/") {
			return m.HostPath + v[len(m.ContainerPath):]
		}
	}
	if sm := wildcardListen.FindStringSubmatch(v); sm != nil {
		return r.ip + ":" + sm[2]
	}
	for _, n := range r.names {
		if n != "" && strings.Contains(v, n) {
			v = replaceHost(v, n, r.ip)
		}
	}
	return v
}

// replaceHost replaces whole-label occurrences of name in v by ip: the
// character after name must not continue a host name, so "a.svc" is not
// replaced inside "a.svc2".
func replaceHost(v, name, ip string) string {
	var b strings.Builder
	for {
		i := strings.Index(v, name)
		if i < 0 {
			b.WriteString(v)
			return b.String()
		}
		end := i + len(name)
		before := i == 0 || !isHostChar(v[i-1])
		after := end == len(v) || !isHostChar(v[end]) || clusterLocalSuffix(v[end:]) > 0
		if before && after {
			b.WriteString(v[:i])
			b.WriteString(ip)
			end += clusterLocalSuffix(v[end:])
		} else {
			b.WriteString(v[:end])
		}
		v = v[end:]
	}
}

// clusterLocalSuffix is the length of a ".cluster.local" (optionally
// followed by a '.') suffix at the start of rest that ends the host name.
func clusterLocalSuffix(rest string) int {
	const s = ".cluster.local"
	if !strings.HasPrefix(rest, s) {
		return 0
	}
	n := len(s)
	if strings.HasPrefix(rest[n:], ".") && (len(rest) == n+1 || !isHostChar(rest[n+1])) {
		n++
	}
	if n < len(rest) && isHostChar(rest[n]) {
		return 0
	}
	return n
}

func isHostChar(c byte) bool {
	return c == '.' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// RewriteAll applies Rewrite to each value.
func (r *Rewriter) RewriteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = r.Rewrite(v)
	}
	return out
}
