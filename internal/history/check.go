package history

import (
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is a checked history.
type Result struct {
	Verdict porcupine.CheckResult
	Stats   Stats
	info    porcupine.LinearizationInfo
}

// Check checks the recorded history against Model within timeout (0: no
// limit); a verdict of porcupine.Unknown means the check timed out.
func (r *Recorder) Check(timeout time.Duration) Result {
	ops, st := r.Operations()
	return CheckOperations(ops, st, timeout)
}

// CheckOperations checks ops (as Operations returns them) against Model.
func CheckOperations(ops []porcupine.Operation, st Stats, timeout time.Duration) Result {
	v, info := porcupine.CheckOperationsVerbose(Model(), ops, timeout)
	return Result{Verdict: v, Stats: st, info: info}
}

// Visualize writes porcupine's HTML visualization of the check to path.
func (res Result) Visualize(path string) error {
	return porcupine.VisualizePath(Model(), res.info, path)
}
