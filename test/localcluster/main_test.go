package localcluster_test

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

func TestMain(m *testing.M) {
	// The podrunner and the snapshot controller run in this process with
	// their own loggers; controller-runtime's global one is not part of the
	// test output (the operator and broker logs are files in the state
	// directory).
	ctrl.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
