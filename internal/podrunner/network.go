package podrunner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrNotBridgeMode is returned by Partition and Heal when the runner does
// not run containers on a Docker bridge network (Config.Docker.Network
// unset): with host networking or local processes, every pod shares the
// host's network namespace and cannot be cut off.
var ErrNotBridgeMode = errors.New("podrunner: not in container mode on a bridge network (DockerConfig.Network unset)")

// ErrSubnetInUse is returned by New when the subnet of the bridge network
// it would create overlaps another Docker network or a host interface, or
// when no /24 of the default pool is free.
var ErrSubnetInUse = errors.New("podrunner: subnet overlaps a Docker network or a host interface")

// ErrNotBridgeNetwork is returned by New when Config.Docker.Network names
// an existing Docker network that is not a bridge network with an IPv4
// subnet.
var ErrNotBridgeNetwork = errors.New("podrunner: not a Docker bridge network with an IPv4 subnet")

// defaultSubnetPool is where New looks for a free /24 when it creates a
// bridge network without DockerConfig.Subnet.
var defaultSubnetPool = netip.MustParsePrefix("172.29.0.0/16")

// BridgeNetwork is the Docker bridge network of bridge container mode.
type BridgeNetwork struct {
	// Name is the Docker network's name (DockerConfig.Network).
	Name string
	// Subnet is the network's IPv4 subnet; every pod's address is in it.
	Subnet netip.Prefix
	// Gateway is the host's own address on the network: containers reach
	// the host there, e.g. the API server (the runner points the pods'
	// kubeconfigs at it; whatever serves the API on the host's loopback
	// must also listen on Gateway at the same port).
	Gateway netip.Addr
	// Created reports whether the runner created the network, and so
	// removes it when Run returns (or on Close).
	Created bool
}

// dockerNetwork is what `docker network inspect` says of a network.
type dockerNetwork struct {
	Name   string `json:"Name"`
	Driver string `json:"Driver"`
	IPAM   struct {
		Config []struct {
			Subnet  string `json:"Subnet"`
			Gateway string `json:"Gateway"`
		} `json:"Config"`
	} `json:"IPAM"`
}

// ipv4 returns the network's first IPv4 subnet and its gateway (the
// subnet's first host address when Docker does not say).
func (n dockerNetwork) ipv4() (netip.Prefix, netip.Addr, bool) {
	for _, c := range n.IPAM.Config {
		p, err := netip.ParsePrefix(c.Subnet)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		gw, err := netip.ParseAddr(c.Gateway)
		if err != nil {
			gw = p.Addr().Next()
		}
		return p, gw, true
	}
	return netip.Prefix{}, netip.Addr{}, false
}

// inspectNetworks returns what Docker says of the named networks (every
// network when names is empty).
func inspectNetworks(docker string, names ...string) ([]dockerNetwork, error) {
	if len(names) == 0 {
		out, err := dockerOutput(docker, "network", "ls", "--quiet")
		if err != nil {
			return nil, err
		}
		names = strings.Fields(string(out))
		if len(names) == 0 {
			return nil, nil
		}
	}
	out, err := dockerOutput(docker, append([]string{"network", "inspect"}, names...)...)
	if err != nil {
		return nil, err
	}
	var nets []dockerNetwork
	if err := json.Unmarshal(bytes.TrimSpace(out), &nets); err != nil {
		return nil, fmt.Errorf("podrunner: docker network inspect: %w", err)
	}
	return nets, nil
}

// networkExists reports whether Docker has a network of exactly this name.
func networkExists(docker, name string) (bool, error) {
	out, err := dockerOutput(docker, "network", "ls", "--format", "{{.Name}}")
	if err != nil {
		return false, err
	}
	for _, n := range strings.Fields(string(out)) {
		if n == name {
			return true, nil
		}
	}
	return false, nil
}

// ensureNetwork finds the bridge network d.Network, or creates it on
// d.Subnet (or a free /24 of the default pool).
func ensureNetwork(d DockerConfig, log logr.Logger) (*BridgeNetwork, error) {
	docker := d.dockerCLI()
	exists, err := networkExists(docker, d.Network)
	if err != nil {
		return nil, err
	}
	if exists {
		nets, err := inspectNetworks(docker, d.Network)
		if err != nil {
			return nil, err
		}
		if len(nets) != 1 || nets[0].Driver != "bridge" {
			return nil, fmt.Errorf("%w: %s", ErrNotBridgeNetwork, d.Network)
		}
		subnet, gw, ok := nets[0].ipv4()
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNotBridgeNetwork, d.Network)
		}
		log.Info("using existing bridge network", "network", d.Network, "subnet", subnet, "gateway", gw)
		return &BridgeNetwork{Name: d.Network, Subnet: subnet, Gateway: gw}, nil
	}
	used, err := usedSubnets(docker)
	if err != nil {
		return nil, err
	}
	subnet := d.Subnet.Masked()
	if d.Subnet.IsValid() {
		if !subnet.Addr().Is4() || subnet.Bits() > 30 {
			return nil, fmt.Errorf("podrunner: bridge subnet %s: want an IPv4 subnet of at least 4 addresses", d.Subnet)
		}
		if p, ok := overlapping(subnet, used); ok {
			return nil, fmt.Errorf("%w: %s overlaps %s", ErrSubnetInUse, subnet, p)
		}
	} else if subnet, err = freeSubnet(defaultSubnetPool, used); err != nil {
		return nil, err
	}
	gw := subnet.Addr().Next()
	if _, err := dockerOutput(docker, "network", "create", "--driver", "bridge",
		"--subnet", subnet.String(), "--gateway", gw.String(),
		"--label", "felix.dev/podrunner=true", d.Network); err != nil {
		return nil, err
	}
	log.Info("created bridge network", "network", d.Network, "subnet", subnet, "gateway", gw)
	return &BridgeNetwork{Name: d.Network, Subnet: subnet, Gateway: gw, Created: true}, nil
}

// usedSubnets lists the IPv4 subnets of every Docker network and of every
// host interface.
func usedSubnets(docker string) ([]netip.Prefix, error) {
	nets, err := inspectNetworks(docker)
	if err != nil {
		return nil, err
	}
	var used []netip.Prefix
	for _, n := range nets {
		for _, c := range n.IPAM.Config {
			if p, err := netip.ParsePrefix(c.Subnet); err == nil {
				used = append(used, p.Masked())
			}
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("podrunner: host interfaces: %w", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				ones, _ := ipn.Mask.Size()
				used = append(used, netip.PrefixFrom(ip.Unmap(), ones).Masked())
			}
		}
	}
	return used, nil
}

// overlapping returns a prefix of used that overlaps p.
func overlapping(p netip.Prefix, used []netip.Prefix) (netip.Prefix, bool) {
	for _, u := range used {
		if u.Overlaps(p) {
			return u, true
		}
	}
	return netip.Prefix{}, false
}

// freeSubnet returns the first /24 of pool that overlaps none of used.
func freeSubnet(pool netip.Prefix, used []netip.Prefix) (netip.Prefix, error) {
	for a := pool.Masked().Addr(); pool.Contains(a); {
		p := netip.PrefixFrom(a, 24)
		if _, ok := overlapping(p, used); !ok {
			return p, nil
		}
		b := a.As4()
		if b[2] == 255 {
			break
		}
		b[2]++
		a = netip.AddrFrom4(b)
	}
	return netip.Prefix{}, fmt.Errorf("%w: no free /24 in %s", ErrSubnetInUse, pool)
}

// removeNetwork removes a network the runner created, once the containers
// stopped at shutdown have been removed (docker removes a --rm container
// shortly after it exits); it gives up after a deadline.
func removeNetwork(docker string, n *BridgeNetwork) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := dockerOutput(docker, "network", "rm", n.Name)
		if err == nil {
			return nil
		}
		if exists, xerr := networkExists(docker, n.Name); xerr == nil && !exists {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// reachFromBridge rewrites a kubeconfig for a container on a bridge
// network: a cluster served on the host's loopback (127.0.0.0/8, ::1,
// localhost) is reached at the network's gateway on the same port, with
// tls-server-name set to the original host, so the server's certificate
// (issued for the loopback name) still verifies.
func reachFromBridge(kc *clientcmdapi.Config, gateway netip.Addr) {
	for _, c := range kc.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil || u.Host == "" {
			continue
		}
		host := u.Hostname()
		if !loopbackHost(host) {
			continue
		}
		port := u.Port()
		if port == "" {
			port = "80"
			if u.Scheme == "https" {
				port = "443"
			}
		}
		if c.TLSServerName == "" && u.Scheme == "https" {
			c.TLSServerName = host
		}
		u.Host = net.JoinHostPort(gateway.String(), port)
		c.Server = u.String()
	}
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
