package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoAppVersion: charts/felix/Chart.yaml names no appVersion.
var ErrNoAppVersion = errors.New("charts/felix/Chart.yaml has no appVersion")

// ChartAppVersion returns the appVersion of charts/felix, the image tag
// the chart installs by default.
func ChartAppVersion() (string, error) {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "charts", "felix", "Chart.yaml"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`), nil
		}
	}
	return "", ErrNoAppVersion
}
