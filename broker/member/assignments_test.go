package member

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replica"
)

// A stream's retention and fencing map to its data logs' policy; absent
// or non-positive limits are off. A fenced stream with retention (refused
// by the API) is passed on as it is, for the replica manager to refuse.
func TestLogPolicy(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	for _, tc := range []struct {
		name string
		spec felixv1.FelixStreamSpec
		want replica.LogPolicy
	}{
		{name: "default: off, not fenced"},
		{name: "fenced", spec: felixv1.FelixStreamSpec{Fenced: true}, want: replica.LogPolicy{Fenced: true}},
		{name: "empty retention", spec: felixv1.FelixStreamSpec{Retention: &felixv1.RetentionSpec{}}},
		{name: "bytes", spec: felixv1.FelixStreamSpec{Retention: &felixv1.RetentionSpec{MaxBytes: q("1Gi")}},
			want: replica.LogPolicy{Retention: logstore.RetentionPolicy{MaxBytes: 1 << 30}}},
		{name: "age and bytes", spec: felixv1.FelixStreamSpec{Retention: &felixv1.RetentionSpec{MaxAge: d(time.Hour), MaxBytes: q("10M")}},
			want: replica.LogPolicy{Retention: logstore.RetentionPolicy{MaxAge: time.Hour, MaxBytes: 10_000_000}}},
		{name: "zero limits are off", spec: felixv1.FelixStreamSpec{Retention: &felixv1.RetentionSpec{MaxAge: d(0), MaxBytes: q("0")}}},
		{name: "fenced with retention passes on", spec: felixv1.FelixStreamSpec{Fenced: true, Retention: &felixv1.RetentionSpec{MaxBytes: q("1Ki")}},
			want: replica.LogPolicy{Fenced: true, Retention: logstore.RetentionPolicy{MaxBytes: 1024}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := logPolicy(tc.spec); got != tc.want {
				t.Fatalf("logPolicy = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A FelixShard name parses back to its shard, the index after the last
// '-'; anything else is refused.
func TestParseShardName(t *testing.T) {
	for _, s := range []record.ShardID{{Stream: "orders", Shard: 0}, {Stream: "eu-orders-v2", Shard: 17}} {
		if got, err := parseShardName(shardName(s)); err != nil || got != s {
			t.Fatalf("parse(%q) = %v %v, want %v", shardName(s), got, err, s)
		}
	}
	for _, bad := range []string{"orders", "-1", "orders-", "orders-x", "orders-99999999999"} {
		if got, err := parseShardName(bad); err == nil {
			t.Fatalf("parse(%q) = %v, want an error", bad, got)
		}
	}
}
