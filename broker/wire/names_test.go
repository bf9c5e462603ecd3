package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestStreamNames(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"Orders_2026.v1-eu", true},
		{strings.Repeat("a", MaxStreamNameLen), true},
		{"my-stream.example.com", true}, // a DNS-1123 subdomain
		{"", false},
		{strings.Repeat("a", MaxStreamNameLen+1), false},
		{"with space", false},
		{"slash/name", false},
		{"\xff\xfe", false},  // not UTF-8
		{"caf\u00e9", false}, // UTF-8, not in the set
		{"nul\x00", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStreamName(tc.name)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrMalformed)) {
				t.Fatalf("CheckStreamName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			}
			// Every request that names a shard applies the rule on both
			// sides of the wire.
			good, _ := EncodeDescribe(DescribeRequest{Shard: ShardRef{Stream: "x"}})
			body := append([]byte{0, byte(len(tc.name))}, tc.name...)
			body = append(body, good[3:]...)
			if len(tc.name) > 255 {
				return
			}
			if _, err := DecodeDescribe(body); (err == nil) != tc.ok {
				t.Fatalf("DecodeDescribe(%q): %v, want ok=%v", tc.name, err, tc.ok)
			}
			if _, err := EncodeRead(ReadRequest{Shard: ShardRef{Stream: tc.name}}); (err == nil) != tc.ok {
				t.Fatalf("EncodeRead(%q): %v, want ok=%v", tc.name, err, tc.ok)
			}
		})
	}
}
