package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults that the CRD schema applies on admission; the helpers below apply
// the same values to objects built in Go that never went through the API
// server.
const (
	DefaultBrokers           int32         = 3
	DefaultHeartbeatInterval time.Duration = 2 * time.Second
	DefaultNodeExpiry        time.Duration = 10 * time.Second
	DefaultFsyncInterval     time.Duration = 100 * time.Millisecond
	DefaultStorageSize                     = "1Gi"
	DefaultLeaderSettleTime  time.Duration = 30 * time.Second
)

// PreferredLeaderBalance reports whether leadership moves to preferred
// replicas (spec.leaderBalance.mode, Preferred unless Off), and after
// what settle time.
func (s *FelixClusterSpec) PreferredLeaderBalance() (on bool, settle time.Duration) {
	if s.LeaderBalance.Mode == LeaderBalanceOff {
		return false, 0
	}
	settle = DefaultLeaderSettleTime
	if d := s.LeaderBalance.SettleTime; d != nil && d.Duration >= 0 {
		settle = d.Duration
	}
	return true, settle
}

// HeartbeatIntervalOrDefault returns spec.heartbeatInterval, or its default.
func (s *FelixClusterSpec) HeartbeatIntervalOrDefault() time.Duration {
	if s.HeartbeatInterval == nil || s.HeartbeatInterval.Duration <= 0 {
		return DefaultHeartbeatInterval
	}
	return s.HeartbeatInterval.Duration
}

// NodeExpiryOrDefault returns spec.nodeExpiry, or its default.
func (s *FelixClusterSpec) NodeExpiryOrDefault() time.Duration {
	if s.NodeExpiry == nil || s.NodeExpiry.Duration <= 0 {
		return DefaultNodeExpiry
	}
	return s.NodeExpiry.Duration
}

// ReportExpiry is how long a leader's report is believed: twice the node
// expiry timeout plus one heartbeat ([CP-2]).
func (s *FelixClusterSpec) ReportExpiry() time.Duration {
	return 2*s.NodeExpiryOrDefault() + s.HeartbeatIntervalOrDefault()
}

// FsyncModeOrDefault returns spec.durability.fsync, or OnCommit.
func (s *FelixClusterSpec) FsyncModeOrDefault() FsyncMode {
	if s.Durability.Fsync == "" {
		return FsyncOnCommit
	}
	return s.Durability.Fsync
}

// FsyncIntervalOrDefault returns spec.durability.fsyncInterval, or its default.
func (s *FelixClusterSpec) FsyncIntervalOrDefault() time.Duration {
	if s.Durability.FsyncInterval == nil || s.Durability.FsyncInterval.Duration <= 0 {
		return DefaultFsyncInterval
	}
	return s.Durability.FsyncInterval.Duration
}

// StorageSizeOrDefault returns spec.storage.size, or its default.
func (s *FelixClusterSpec) StorageSizeOrDefault() resource.Quantity {
	if s.Storage.Size == nil || s.Storage.Size.IsZero() {
		return resource.MustParse(DefaultStorageSize)
	}
	return *s.Storage.Size
}

// BrokersOrDefault returns spec.brokers, or its default.
func (s *FelixClusterSpec) BrokersOrDefault() int32 {
	if s.Brokers <= 0 {
		return DefaultBrokers
	}
	return s.Brokers
}

// RetentionOn reports whether any retention limit is set ([TR-7]).
func (s *FelixStreamSpec) RetentionOn() bool {
	return s.Retention != nil && (s.Retention.MaxAge != nil || s.Retention.MaxBytes != nil)
}
