package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLocalImageBuildUsesTheDockerfilesLastStage: hack/docker-build.sh
// (the path for machines that cannot pull a Go builder image) builds the
// Dockerfile's own last stage with only the binary's source replaced, and
// both paths build the binary with hack/build-felix.sh, so the two images
// have the same layout.
func TestLocalImageBuildUsesTheDockerfilesLastStage(t *testing.T) {
	r := root(t)
	df, err := os.ReadFile(filepath.Join(r, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(df)
	last := strings.LastIndex(text, "\nFROM ")
	if last < 0 {
		t.Fatal("the Dockerfile has no FROM")
	}
	if !strings.Contains(text[:last], "hack/build-felix.sh /out/felix") {
		t.Error("the Dockerfile's build stage does not build with hack/build-felix.sh /out/felix")
	}
	want := strings.Replace(text[last+1:], "COPY --from=build /out/felix ", "COPY felix ", 1)
	out, err := exec.Command(filepath.Join(r, "hack", "docker-build.sh"), "--print-dockerfile").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	if !strings.HasSuffix(got, want) {
		t.Errorf("hack/docker-build.sh builds\n%s\nwant the Dockerfile's last stage\n%s", got, want)
	}
	if strings.Contains(got, "--from=") {
		t.Errorf("the local build still copies from another stage:\n%s", got)
	}
	if !strings.HasPrefix(got, "ARG BASE=") {
		t.Errorf("the local build lost the BASE argument:\n%s", got)
	}
}
