package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// repoRoot is the repository root, two levels above this package.
const repoRoot = "../.."

// docFiles are the documents whose flags are checked: docs/*.md and the
// two READMEs a reader starts from.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(files) < 5 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(files))
	}
	return append(files, filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "formal", "README.md"))
}

// felixFlags returns every flag of every felix subcommand, by name, with
// the commands that define it.
func felixFlags() map[string][]string {
	out := map[string][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		add := func(f *pflag.Flag) {
			if !slices.Contains(out[f.Name], c.CommandPath()) {
				out[f.Name] = append(out[f.Name], c.CommandPath())
			}
		}
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	return out
}

var (
	// docFlag is a double-dash flag in prose or a command line.
	docFlag = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--([a-z][a-z0-9-]*[a-z0-9])`)
	// goFlag is a flag defined with the standard flag package.
	goFlag = regexp.MustCompile(`flag\.[A-Z][A-Za-z0-9]*\(\s*(?:&[^,]+,\s*)?"([a-z][a-z0-9.-]*)"`)
	// cobraFlag is a flag a cobra command defines (kubectl-felix).
	cobraFlag = regexp.MustCompile(`\.(?:String|Bool|Int|Int64|Uint32|Uint64|Duration|StringArray)(?:Var)?P?\(\s*(?:&[^,]+,\s*)?"([a-z][a-z0-9-]*)"`)
	// shellFlag is an option a hack/ script's case statement accepts.
	shellFlag = regexp.MustCompile(`(?m)^\s*(?:[^)\n]*\|\s*)?--([a-z][a-z0-9-]*)\s*(?:\|[^)\n]*)?\)`)
)

// otherPrograms are this repository's other programs; the docs show their
// flags too.
var otherPrograms = []string{
	"cmd/felix-csi-hostpath/main.go",
	"cmd/felix-dev/main.go",
	"cmd/felix-sim/main.go",
	"cmd/kubectl-felix/main.go",
	"cmd/kubectl-felix/status.go",
	"cmd/kubectl-felix/shards.go",
	"cmd/kubectl-felix/switchover.go",
	"cmd/kubectl-felix/backup.go",
	"hack/natsbench/main.go",
	"hack/check-models.sh",
	"hack/bench-peer.sh",
	"hack/bench-rounds.sh",
	"hack/dev.sh",
}

// outsideFlags are flags of tools outside the repository that the docs
// show in commands (docker, kubectl, go test). Each names its tool.
var outsideFlags = map[string]string{
	"attach":           "docker start",
	"build-arg":        "docker build",
	"create-namespace": "helm upgrade",
	"for":              "kubectl wait",
	"install":          "helm upgrade",
	"overrides":        "kubectl run",
	"set":              "helm upgrade",
	"cascade":          "kubectl delete",
	"driver":           "docker network create",
	"filter":           "docker ps",
	"flag":             "any flag, in \"a `--flag=value` argument\"",
	"ip":               "docker network connect",
	"network":          "docker run",
	"privileged":       "docker run",
	"raw":              "kubectl get",
	"server-side":      "kubectl apply",
	"type":             "kubectl patch",
	"signal":           "docker kill",
	"user":             "docker run",
}

// programFlags returns the flags the other programs define, by name, with
// the files that define them.
func programFlags(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range otherPrograms {
		data, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			t.Fatal(err)
		}
		res := []*regexp.Regexp{goFlag, cobraFlag}
		if strings.HasSuffix(p, ".sh") {
			res = []*regexp.Regexp{shellFlag}
		}
		for _, re := range res {
			for _, m := range re.FindAllSubmatch(data, -1) {
				out[string(m[1])] = append(out[string(m[1])], p)
			}
		}
	}
	return out
}

// TestDocFlagsExist: every --flag the docs name is a flag of some felix
// subcommand, of another program of this repository, or of an outside
// tool listed in outsideFlags.
func TestDocFlagsExist(t *testing.T) {
	felix := felixFlags()
	if len(felix["data-dir"]) == 0 || len(felix["advertise"]) == 0 {
		t.Fatalf("the felix command tree has no --data-dir or --advertise: %v", felix)
	}
	programs := programFlags(t)
	if len(programs["docker-image"]) == 0 || len(programs["full"]) == 0 {
		t.Fatalf("the other programs' flags were not found: %v", programs)
	}
	checked := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docFlag.FindAllSubmatchIndex(data, -1) {
			name := string(data[m[2]:m[3]])
			checked++
			if len(felix[name]) > 0 || len(programs[name]) > 0 || outsideFlags[name] != "" {
				continue
			}
			line := bytes.Count(data[:m[2]], []byte{'\n'}) + 1
			t.Errorf("%s:%d: --%s is a flag of no felix subcommand and of no other program here (%s); fix the doc, or list an outside tool's flag in outsideFlags",
				strings.TrimPrefix(file, repoRoot+"/"), line, name, strings.Join(otherPrograms, ", "))
		}
	}
	if checked < 50 {
		t.Fatalf("only %d flags found in the docs: the pattern is broken", checked)
	}
	for name, tool := range outsideFlags {
		if len(felix[name]) > 0 || len(programs[name]) > 0 {
			t.Errorf("outsideFlags lists --%s (%s), but a program here defines it: drop the entry", name, tool)
		}
	}
}

// TestDocBrokerCommandLine: the broker pod's command line in
// docs/operator.md is the one the operator builds (controllers.BrokerArgs),
// flag for flag, with the values shown. In the doc, C stands for the
// cluster's name, D for a duration and A|B for a choice.
func TestDocBrokerCommandLine(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operator.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```\n(felix broker .*?)```").FindSubmatch(data)
	if block == nil {
		t.Fatal("docs/operator.md has no ``` block starting with `felix broker`")
	}
	doc := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(string(block[1])))[2:]
	c := &felixv1.FelixCluster{ObjectMeta: metav1.ObjectMeta{Name: "C", Namespace: "N"}}
	c.Spec.Durability.Fsync = felixv1.FsyncPeriodic
	c.Spec.Durability.FsyncInterval = &metav1.Duration{Duration: 1}
	code := controllers.BrokerArgs(c)
	if len(code) == 0 || code[0] != "broker" {
		t.Fatalf("BrokerArgs = %q, want a `broker` command line", code)
	}
	pairs := func(args []string) map[string]string {
		out := map[string]string{}
		for i := 0; i < len(args); i++ {
			if !strings.HasPrefix(args[i], "--") {
				t.Fatalf("%q: %q is not a flag", args, args[i])
			}
			name, val, ok := strings.Cut(args[i], "=")
			if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				val = args[i+1]
				i++
			}
			out[name] = val
		}
		return out
	}
	docPairs, codePairs := pairs(doc), pairs(code[1:])
	placeholder := regexp.MustCompile(`^(D|[A-Za-z]+(\|[A-Za-z]+)+)$`)
	for name, want := range codePairs {
		got, ok := docPairs[name]
		switch {
		case !ok:
			t.Errorf("docs/operator.md: the broker command line lacks %s (the operator passes %s %s)", name, name, want)
		case placeholder.MatchString(got):
		case got != want:
			t.Errorf("docs/operator.md: the broker command line shows %s %s; the operator passes %s %s", name, got, name, want)
		}
	}
	for name := range docPairs {
		if _, ok := codePairs[name]; !ok {
			t.Errorf("docs/operator.md: the broker command line shows %s, which the operator does not pass", name)
		}
	}
	if t.Failed() {
		t.Logf("operator: %q", code)
	}
}
