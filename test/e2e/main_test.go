package e2e

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestMain(m *testing.M) {
	// The operator's reconcilers run in this process; their logs are not
	// part of the test output (broker logs go to files in the test's dir).
	ctrl.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
