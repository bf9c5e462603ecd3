package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Cluster mode refuses to start without --tls-dir (unless
// --insecure-no-tls), and the modes' TLS flags do not mix; each refusal
// comes before the data directory is touched.
func TestBrokerSecurityFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"cluster without --tls-dir", nil},
		{"cluster with --tls-cert", []string{"--tls-cert", "c", "--tls-key", "k"}},
		{"insecure with --tls-dir", []string{"--insecure-no-tls", "--tls-dir", "d"}},
		{"insecure with --peer-listen", []string{"--insecure-no-tls", "--peer-listen", "127.0.0.1:0"}},
		{"standalone with --tls-dir", []string{"--standalone", "--tls-dir", "d"}},
		{"standalone --tls-client-ca without a certificate", []string{"--standalone", "--tls-client-ca", "ca.crt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			cmd := newBrokerCmd()
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			args := []string{"--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
				"--cluster", "logs", "--broker", "logs-0", "--namespace", "prod", "--kubeconfig", filepath.Join(t.TempDir(), "none")}
			cmd.SetArgs(append(args, tc.args...))
			if err := cmd.ExecuteContext(context.Background()); err == nil {
				t.Fatal("accepted")
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Fatalf("data directory touched: %v", err)
			}
		})
	}
}
