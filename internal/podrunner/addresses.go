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

// AddressBook is the default AddressAllocator: it hands out 127.0.0.First ..
// 127.0.0.Last in order of first request and remembers the assignment in a
// JSON file, so a pod name keeps its address across pod recreation and
// runner restarts. Addresses are never released (a range of 253 names is
// plenty for a local cluster).
type AddressBook struct {
	path        string
	first, last byte

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
	b := &AddressBook{path: path, first: first, last: last, assigned: map[string]netip.Addr{}}
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
	if !a.Is4() {
		return false
	}
	o := a.As4()
	return o[0] == 127 && o[1] == 0 && o[2] == 0 && o[3] >= b.first && o[3] <= b.last
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
	for x := int(b.first); x <= int(b.last); x++ {
		a := netip.AddrFrom4([4]byte{127, 0, 0, byte(x)})
		if used[a] {
			continue
		}
		b.assigned[key] = a
		if err := b.save(); err != nil {
			delete(b.assigned, key)
			return netip.Addr{}, err
		}
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("%w in 127.0.0.%d-127.0.0.%d for %s", ErrAddressesExhausted, b.first, b.last, key)
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
