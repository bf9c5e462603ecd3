package podrunner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// ErrAddressesExhausted is returned when every address of an AddressBook's
// range is taken.
var ErrAddressesExhausted = errors.New("podrunner: no free pod address")

// AddressAllocator gives each pod its address. It must return the same
// address for the same namespace/name every time (a recreated broker pod
// keeps its address, as a pod keeps its DNS name) and different addresses
// for different pods.
type AddressAllocator interface {
	Allocate(namespace, name string) (netip.Addr, error)
}

// AddressBook is the default AddressAllocator: it hands out the addresses
// of its range (127.0.0.First .. 127.0.0.Last, or the hosts of a subnet) in
// order of first request and remembers the assignment in a JSON file, so a
// pod name keeps its address across pod recreation and runner restarts.
// Addresses are never released (a range of 253 names is plenty for a local
// cluster).
type AddressBook struct {
	path     string
	lo, hi   netip.Addr          // the range, both included
	reserved map[netip.Addr]bool // inside the range but never handed out
	desc     string              // the range, for errors

	mu       sync.Mutex
	assigned map[string]netip.Addr
}

// NewAddressBook loads (or starts) the address book at path for addresses
// 127.0.0.first .. 127.0.0.last. first must be at least 2: 127.0.0.1 is the
// host's own loopback address, where the API server listens.
func NewAddressBook(path string, first, last byte) (*AddressBook, error) {
	if first < 2 || last < first || last == 255 {
		return nil, fmt.Errorf("podrunner: address range 127.0.0.%d-127.0.0.%d: want 2 <= first <= last <= 254", first, last)
	}
	return loadAddressBook(path, netip.AddrFrom4([4]byte{127, 0, 0, first}), netip.AddrFrom4([4]byte{127, 0, 0, last}), nil,
		fmt.Sprintf("127.0.0.%d-127.0.0.%d", first, last))
}

// NewSubnetAddressBook loads (or starts) the address book at path for the
// host addresses of an IPv4 subnet (bridge container mode): every address
// but the network address, the broadcast address and reserved (the
// network's gateway). The subnet must hold at least one such address.
// Assignments in the file outside the subnet are dropped, so a book whose
// network was recreated on another subnet starts afresh.
func NewSubnetAddressBook(path string, subnet netip.Prefix, reserved ...netip.Addr) (*AddressBook, error) {
	subnet = subnet.Masked()
	if !subnet.IsValid() || !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return nil, fmt.Errorf("podrunner: address book subnet %s: want an IPv4 subnet of at least 4 addresses", subnet)
	}
	lo := subnet.Addr().Next()
	b := lo.As4()
	host := uint32(1)<<(32-subnet.Bits()) - 1
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	n += host - 2 // the last host address: broadcast - 1
	hi := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	res := map[netip.Addr]bool{}
	for _, a := range reserved {
		res[a] = true
	}
	return loadAddressBook(path, lo, hi, res, subnet.String())
}

func loadAddressBook(path string, lo, hi netip.Addr, reserved map[netip.Addr]bool, desc string) (*AddressBook, error) {
	b := &AddressBook{path: path, lo: lo, hi: hi, reserved: reserved, desc: desc, assigned: map[string]netip.Addr{}}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return b, nil
	case err != nil:
		return nil, fmt.Errorf("podrunner: read address book: %w", err)
	}
	var saved map[string]string
	if err := json.Unmarshal(data, &saved); err != nil {
		return nil, fmt.Errorf("podrunner: address book %s: %w", path, err)
	}
	// In key order, so a (hand-edited) file giving one address to two
	// names deterministically keeps the first and drops the other.
	keys := make([]string, 0, len(saved))
	for k := range saved {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	taken := map[netip.Addr]bool{}
	for _, k := range keys {
		a, err := netip.ParseAddr(saved[k])
		if err != nil {
			return nil, fmt.Errorf("podrunner: address book %s: %q: %w", path, k, err)
		}
		if b.inRange(a) && !taken[a] {
			b.assigned[k] = a
			taken[a] = true
		}
	}
	return b, nil
}

func (b *AddressBook) inRange(a netip.Addr) bool {
	return a.Is4() && a.Compare(b.lo) >= 0 && a.Compare(b.hi) <= 0 && !b.reserved[a]
}

// Allocate returns the address of namespace/name, assigning the lowest free
// one on first request.
func (b *AddressBook) Allocate(namespace, name string) (netip.Addr, error) {
	key := namespace + "/" + name
	b.mu.Lock()
	defer b.mu.Unlock()
	if a, ok := b.assigned[key]; ok {
		return a, nil
	}
	used := map[netip.Addr]bool{}
	for _, a := range b.assigned {
		used[a] = true
	}
	for a := b.lo; a.IsValid() && a.Compare(b.hi) <= 0; a = a.Next() {
		if used[a] || b.reserved[a] {
			continue
		}
		b.assigned[key] = a
		if err := b.save(); err != nil {
			delete(b.assigned, key)
			return netip.Addr{}, err
		}
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("%w in %s for %s", ErrAddressesExhausted, b.desc, key)
}

func (b *AddressBook) save() error {
	out := make(map[string]string, len(b.assigned))
	for k, a := range b.assigned {
		out[k] = a.String()
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(b.path), 0o755); err != nil {
		return fmt.Errorf("podrunner: address book: %w", err)
	}
	tmp := b.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("podrunner: address book: %w", err)
	}
	if err := os.Rename(tmp, b.path); err != nil {
		return fmt.Errorf("podrunner: address book: %w", err)
	}
	return nil
}
