package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/controllers"
)

// TestBootstrapAddrs: --bootstrap (repeatable) wins over FELIX_BOOTSTRAP,
// --broker alone turns both off, the two flags together are a usage error,
// and an address without a port gets the client port.
func TestBootstrapAddrs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     string
		want    []string
		wantErr bool
	}{
		{name: "nothing: --broker's default", want: nil},
		{name: "flags", args: []string{"--bootstrap", "10.0.0.1:7200", "--bootstrap", "b-1.felix"}, env: "x:1",
			want: []string{"10.0.0.1:7200", "b-1.felix:7100"}},
		{name: "environment", env: "10.0.0.1, 10.0.0.2:7100,", want: []string{"10.0.0.1:7100", "10.0.0.2:7100"}},
		{name: "--broker ignores the environment", args: []string{"--broker", "10.0.0.9:7100"}, env: "10.0.0.1", want: nil},
		{name: "both flags", args: []string{"--broker", "10.0.0.9:7100", "--bootstrap", "10.0.0.1"}, wantErr: true},
		{name: "empty list", args: []string{"--bootstrap", " "}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f shardFlags
			cmd := &cobra.Command{Use: "x"}
			f.register(cmd)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.bootstrapAddrs(cmd, func(k string) string {
				if k == envBootstrap {
					return tc.env
				}
				return ""
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("addresses (-want +got):\n%s", diff)
			}
		})
	}
}

// staticMeta is a cluster's metadata fixed by a test.
type staticMeta struct {
	brokers []wire.BrokerInfo
	shards  []wire.ShardInfo
}

func (m *staticMeta) Brokers(context.Context) ([]wire.BrokerInfo, error) { return m.brokers, nil }

func (m *staticMeta) Shards(context.Context, []string) ([]wire.ShardInfo, error) {
	return m.shards, nil
}

// metaBroker serves a store on loopback and answers Metadata with a
// cluster of one broker, b-0 (itself), leading orders/0 and orders/1.
func metaBroker(t *testing.T) string {
	t.Helper()
	store, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: logstore.FsyncNone, AutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	meta := &staticMeta{brokers: []wire.BrokerInfo{{Name: "b-0", Address: addr}}, shards: []wire.ShardInfo{
		{Shard: record.ShardID{Stream: "orders", Shard: 0}, Leader: "b-0", Epoch: 2, Replicas: []string{"b-0"}},
		{Shard: record.ShardID{Stream: "orders", Shard: 1}, Replicas: []string{"b-0"}},
	}}
	srv := server.New(server.StoreShards(store), server.Options{Metadata: meta})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		_ = store.Close()
	})
	return addr
}

func runCmd(t *testing.T, cmd *cobra.Command, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("%s %q: %v\n%s", cmd.Name(), args, err, errOut.String())
	}
	return out.String()
}

// TestShardsAndRoutedCommands: `felix shards` prints each shard's leader,
// its address, epoch and replicas from the Metadata answer, and the
// client commands given --bootstrap send their requests to the leader.
func TestShardsAndRoutedCommands(t *testing.T) {
	addr := metaBroker(t)
	out := runCmd(t, newShardsCmd(), "--bootstrap", addr, "--stream", "orders")
	var got []shardLine
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var l shardLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, l)
	}
	want := []shardLine{
		{Stream: "orders", Shard: 0, Leader: "b-0", LeaderAddress: addr, Epoch: 2, Replicas: []string{"b-0"}},
		{Stream: "orders", Shard: 1, Replicas: []string{"b-0"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("shards (-want +got):\n%s", diff)
	}
	if out := runCmd(t, newStreamsCmd(), "--bootstrap", addr); strings.TrimSpace(out) != `{"stream":"orders","shards":2,"led":1}` {
		t.Fatalf("streams printed %q", out)
	}

	runCmd(t, newAppendCmd(), "--bootstrap", addr, "--stream", "orders", "--payload", "routed")
	out = runCmd(t, newReadCmd(), "--bootstrap", addr, "--stream", "orders", "--from", "earliest")
	var line readLine
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &line); err != nil || line.Payload == nil || *line.Payload != "routed" {
		t.Fatalf("read printed %q (%v), want the routed record", out, err)
	}
	// --idempotent numbers the batch (a routing client, for --broker too;
	// this broker keeps producer tables as any broker does).
	for _, via := range [][]string{{"--bootstrap", addr}, {"--broker", addr}} {
		out = runCmd(t, newAppendCmd(), append(via, "--stream", "orders", "--idempotent", "--payload", "once")...)
		if !strings.Contains(out, `"first"`) {
			t.Fatalf("append --idempotent %v printed %q", via, out)
		}
	}
	runCmd(t, newAppendCmd(), "--bootstrap", addr, "--stream", "orders", "--payload", "second")
	runCmd(t, newAppendCmd(), "--bootstrap", addr, "--stream", "orders", "--payload", "third")
	// Routed --follow goes through Cluster.Follow and stops at --limit.
	out = runCmd(t, newReadCmd(), "--bootstrap", addr, "--stream", "orders", "--from", "earliest", "--follow", "--limit", "3", "-o", "table")
	if !strings.Contains(out, "routed") || strings.Count(out, "once") != 2 {
		t.Fatalf("read --follow --limit 3 printed %q, want the routed record and the two idempotent ones", out)
	}
}

// TestDefaultPortIsTheClusterPort: the CLI's default --broker, the
// standalone broker's default --listen and the port cluster pods listen
// on are one port.
func TestDefaultPortIsTheClusterPort(t *testing.T) {
	b := newBrokerCmd()
	for _, tc := range []struct{ name, value string }{
		{"felix append --broker", newAppendCmd().Flags().Lookup("broker").DefValue},
		{"felix broker --listen", b.Flags().Lookup("listen").DefValue},
		{"cluster pods", net.JoinHostPort("", strconv.Itoa(controllers.BrokerPort))},
	} {
		_, port, err := net.SplitHostPort(tc.value)
		if err != nil || port != DefaultClientPort {
			t.Errorf("%s defaults to %q, want port %s", tc.name, tc.value, DefaultClientPort)
		}
	}
}
