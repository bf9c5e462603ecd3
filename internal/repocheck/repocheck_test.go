package repocheck

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// rulesDoc is where every rule tag is defined, relative to the root.
const rulesDoc = "docs/rules.md"

// textFile is one file of the repository, with its path relative to the
// root (slash-separated).
type textFile struct {
	path string
	data []byte
}

// line returns the 1-based line number of byte offset off.
func (f textFile) line(off int) int { return bytes.Count(f.data[:off], []byte{'\n'}) + 1 }

// root returns the repository root: two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !bytes.HasPrefix(mod, []byte("module felix.dev/felix\n")) {
		t.Fatalf("%s is not the Felix repository root (go.mod: %v)", dir, err)
	}
	return dir
}

// skippedDirs are never part of the repository's content: VCS data, build
// output and the local cluster's state (all ignored by .gitignore).
var skippedDirs = map[string]bool{".git": true, "bin": true, ".felix-dev": true}

// repoFiles returns every text file under the root: binaries (a NUL byte
// in the first 8 KiB), compiled test binaries and files over 4 MiB are
// left out.
func repoFiles(t *testing.T, dir string) []textFile {
	t.Helper()
	var out []textFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skippedDirs[d.Name()] && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(d.Name(), ".test") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > 4<<20 {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(data[:min(len(data), 8192)], 0) >= 0 {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, textFile{path: filepath.ToSlash(rel), data: data})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("only %d files under %s: not the repository", len(out), dir)
	}
	return out
}

var (
	// bracketed is any tag-shaped bracket: two capitals, a dash, a digit.
	bracketed = regexp.MustCompile(`\[[A-Z][A-Z]-[0-9][0-9a-z.]*\]`)
	// bracketedTag is the forms a bracketed tag may take: [XX-n], [XX-a..b].
	bracketedTag = regexp.MustCompile(`^\[([A-Z]{2})-([0-9]+)(?:\.\.([0-9]+))?\]$`)
	// bareTag is a tag of a known family without brackets ("ID-2, ID-4",
	// `grep -rn 'RP-5'`, "FD-1..4").
	bareTag = regexp.MustCompile(`\b(ID|RP|CP|TR|FD)-([0-9]+)(?:\.\.([0-9]+))?\b`)
	// namedTag is a tag inside a test or subtest name: TestID3_...,
	// TestTR3TR4FD1_..., TestTwin_RP3_..., "ID1_WipedFollower...".
	namedTag     = regexp.MustCompile(`(?:Test|Twin_|\b)((?:(?:ID|RP|CP|TR|FD)[0-9]+)+)_[A-Za-z]`)
	namedTagPart = regexp.MustCompile(`(ID|RP|CP|TR|FD)([0-9]+)`)
	// ruleHeading is an entry of docs/rules.md: "### [ID-3] statement".
	ruleHeading = regexp.MustCompile(`(?m)^#{2,6}[ \t]+\[([A-Z]{2}-[0-9]+)\][ \t]+\S.*$`)
	anyHeading  = regexp.MustCompile(`(?m)^#{1,6}[ \t]`)
)

// tagUse is one place a tag is used.
type tagUse struct {
	tag   string // "ID-3"
	where string // "path:line"
	text  string // what was found
}

// expand turns a family, a first number and an optional last number into
// tags; ok is false for a range that is empty or implausibly long.
func expand(family, first, last string) (tags []string, ok bool) {
	a, err := strconv.Atoi(first)
	if err != nil {
		return nil, false
	}
	b := a
	if last != "" {
		if b, err = strconv.Atoi(last); err != nil {
			return nil, false
		}
	}
	if b < a || b-a > 20 {
		return nil, false
	}
	for n := a; n <= b; n++ {
		tags = append(tags, fmt.Sprintf("%s-%d", family, n))
	}
	return tags, true
}

// tagUses returns every tag used in f, and every bracket that looks like
// a tag but has no form a reader can resolve.
func tagUses(f textFile) (uses []tagUse, malformed []tagUse) {
	brackets := bracketed.FindAllIndex(f.data, -1)
	inBracket := func(off int) bool {
		for _, m := range brackets {
			if m[0] <= off && off < m[1] {
				return true
			}
		}
		return false
	}
	for _, m := range brackets {
		s := string(f.data[m[0]:m[1]])
		where := fmt.Sprintf("%s:%d", f.path, f.line(m[0]))
		p := bracketedTag.FindStringSubmatch(s)
		if p == nil {
			malformed = append(malformed, tagUse{where: where, text: s})
			continue
		}
		tags, ok := expand(p[1], p[2], p[3])
		if !ok {
			malformed = append(malformed, tagUse{where: where, text: s})
		}
		for _, tag := range tags {
			uses = append(uses, tagUse{tag: tag, where: where, text: s})
		}
	}
	for _, m := range bareTag.FindAllSubmatchIndex(f.data, -1) {
		if inBracket(m[0]) {
			continue
		}
		s := string(f.data[m[0]:m[1]])
		where := fmt.Sprintf("%s:%d", f.path, f.line(m[0]))
		last := ""
		if m[6] >= 0 {
			last = string(f.data[m[6]:m[7]])
		}
		tags, ok := expand(string(f.data[m[2]:m[3]]), string(f.data[m[4]:m[5]]), last)
		if !ok {
			malformed = append(malformed, tagUse{where: where, text: s})
		}
		for _, tag := range tags {
			uses = append(uses, tagUse{tag: tag, where: where, text: s})
		}
	}
	for _, m := range namedTag.FindAllSubmatchIndex(f.data, -1) {
		where := fmt.Sprintf("%s:%d", f.path, f.line(m[0]))
		name := string(f.data[m[2]:m[3]])
		for _, p := range namedTagPart.FindAllStringSubmatch(name, -1) {
			uses = append(uses, tagUse{tag: p[1] + "-" + strings.TrimLeft(p[2], "0"), where: where, text: name})
		}
	}
	return uses, malformed
}

// ruleEntries parses docs/rules.md: the tags it defines, mapped to the
// text of their entry (up to the next heading).
func ruleEntries(t *testing.T, doc []byte) map[string]string {
	t.Helper()
	entries := map[string]string{}
	for _, m := range ruleHeading.FindAllSubmatchIndex(doc, -1) {
		tag := string(doc[m[2]:m[3]])
		if _, dup := entries[tag]; dup {
			t.Errorf("%s: [%s] has two entries", rulesDoc, tag)
		}
		body := doc[m[1]:]
		if next := anyHeading.FindIndex(body); next != nil {
			body = body[:next[0]]
		}
		entries[tag] = string(body)
	}
	return entries
}

// TestRuleTagsResolve: every rule tag used anywhere in the repository has
// an entry in docs/rules.md, and every entry states why the rule exists,
// where it is enforced and what checks it.
func TestRuleTagsResolve(t *testing.T) {
	dir := root(t)
	doc, err := os.ReadFile(filepath.Join(dir, rulesDoc))
	if err != nil {
		t.Fatal(err)
	}
	entries := ruleEntries(t, doc)
	if len(entries) < 20 {
		t.Fatalf("%s defines only %d rules: the headings are not of the form \"### [XX-n] statement\"", rulesDoc, len(entries))
	}
	for tag, body := range entries {
		for _, part := range []string{"**Why.**", "**Enforced.**", "**Checked by.**"} {
			if !strings.Contains(body, part) {
				t.Errorf("%s: the entry for [%s] has no %s part", rulesDoc, tag, part)
			}
		}
	}
	used := map[string]int{}
	for _, f := range repoFiles(t, dir) {
		uses, malformed := tagUses(f)
		for _, u := range malformed {
			t.Errorf("%s: %q is not a tag a reader can look up (write [XX-n] or [XX-a..b])", u.where, u.text)
		}
		for _, u := range uses {
			used[u.tag]++
			if _, ok := entries[u.tag]; !ok {
				t.Errorf("%s: %s uses [%s], which has no entry in %s", u.where, u.text, u.tag, rulesDoc)
			}
		}
	}
	for tag := range entries {
		if used[tag] == 0 {
			t.Errorf("%s: [%s] is defined but used nowhere", rulesDoc, tag)
		}
	}
	t.Logf("%d rules defined, %d tags used", len(entries), len(used))
}

// TestTagScanner keeps the scanner honest: each form it must see, and
// each it must refuse. The inputs spell brackets as < > and the dash as ~
// so that this file does not use the tags it tests.
func TestTagScanner(t *testing.T) {
	spell := strings.NewReplacer("<", "[", ">", "]", "~", "-")
	tests := []struct {
		text      string
		tags      []string
		malformed int
	}{
		{"keeps <ID~3> here", []string{"ID-3"}, 0},
		{"rules <RP~1..3>", []string{"RP-1", "RP-2", "RP-3"}, 0},
		{"registration <ID~2, ID~4>", []string{"ID-2", "ID-4"}, 0},
		{"grep -rn 'TR~4' broker", []string{"TR-4"}, 0},
		{"func TestTR3TR4FD1_SeedTrace(t *testing.T)", []string{"TR-3", "TR-4", "FD-1"}, 0},
		{"func TestTwin_CP1_PlacementIDCheck(t", []string{"CP-1"}, 0},
		{`ts.run(t, "ID5_BackupRestoreReadsBack"`, []string{"ID-5"}, 0},
		{"a new family <XY~1>", []string{"XY-1"}, 0},
		{"odd <ID~3b>", nil, 1},
		{"backwards <TR~5..2>", nil, 1},
		{"bare backwards TR~5..2", nil, 1},
		{"SCP~1, TR~, ID~n, <ID~n>, TestTRIM_x, felixd~epoch", nil, 0},
	}
	for _, tc := range tests {
		text := spell.Replace(tc.text)
		uses, malformed := tagUses(textFile{path: "x", data: []byte(text)})
		var got []string
		for _, u := range uses {
			got = append(got, u.tag)
		}
		slices.Sort(got)
		want := slices.Clone(tc.tags)
		slices.Sort(want)
		if !slices.Equal(got, want) || len(malformed) != tc.malformed {
			t.Errorf("%q: tags %v, %d malformed; want %v, %d", text, got, len(malformed), want, tc.malformed)
		}
	}
}

// outsideRefs are the ways a file could point at design material that
// lives outside the repository. Built from pieces so that this file does
// not match them itself.
var outsideRefs = []string{
	"../" + "shared",
	"shared/" + "seeds",
	"DESIGN" + ".md",
	"DESIGN" + " section",
	"000_" + "ed90351de291b03d",
	"004_" + "2218b279913d7815",
}

// TestNoOutsideReferences: the repository stands alone. Rules are
// explained in docs/rules.md, and nothing points at a path outside the
// repository or at the design posts' files.
func TestNoOutsideReferences(t *testing.T) {
	for _, f := range repoFiles(t, root(t)) {
		for _, ref := range outsideRefs {
			for off := 0; ; {
				i := bytes.Index(f.data[off:], []byte(ref))
				if i < 0 {
					break
				}
				t.Errorf("%s:%d: refers to %q, outside the repository; point at %s or state the fact", f.path, f.line(off+i), ref, rulesDoc)
				off += i + len(ref)
			}
		}
	}
}

// fieldPath is a spec or status field path in prose or a jsonpath:
// `spec.restore.epochFloor`, {.status.assignment.leader}.
var fieldPath = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])\.?((?:spec|status)(?:\.[A-Za-z][A-Za-z0-9]*)+)`)

// schemaHas reports whether the OpenAPI schema s has the field path.
func schemaHas(s *apiextensionsv1.JSONSchemaProps, path []string) bool {
	for _, seg := range path {
		for s.Type == "array" && s.Items != nil && s.Items.Schema != nil {
			s = s.Items.Schema
		}
		if p, ok := s.Properties[seg]; ok {
			s = &p
			continue
		}
		if s.AdditionalProperties != nil || (s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields) {
			return true
		}
		return false
	}
	return true
}

// typeHas reports whether the Go API type t has the field path, by JSON
// names (inlined structs included).
func typeHas(t reflect.Type, path []string) bool {
	for _, seg := range path {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() == reflect.Map {
			return true
		}
		if t.Kind() != reflect.Struct {
			return false
		}
		f, ok := jsonField(t, seg)
		if !ok {
			return false
		}
		t = f
	}
	return true
}

func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name {
			return f.Type, true
		}
		if tag == "" && f.Anonymous {
			if ft, ok := jsonField(f.Type, name); ok {
				return ft, true
			}
		}
	}
	return nil, false
}

// crdSchemas reads every CRD the repository installs: Felix's own and the
// VolumeSnapshot CRDs of the local cluster.
func crdSchemas(t *testing.T, dir string) map[string]*apiextensionsv1.JSONSchemaProps {
	t.Helper()
	out := map[string]*apiextensionsv1.JSONSchemaProps{}
	var files []string
	for _, glob := range []string{"config/crd/bases/*.yaml", "internal/snapshots/crds/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(dir, glob))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := dec.Decode(&crd); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for _, v := range crd.Spec.Versions {
				if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
					out[crd.Spec.Names.Kind+"/"+v.Name] = v.Schema.OpenAPIV3Schema
				}
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %d CRD schemas", len(out))
	}
	return out
}

// kubeTypes are the Kubernetes objects the docs describe fields of besides
// the CRDs: broker pods, their claims and the heartbeat and felixd Leases.
var kubeTypes = map[string]reflect.Type{
	"Pod":                   reflect.TypeFor[corev1.Pod](),
	"PersistentVolumeClaim": reflect.TypeFor[corev1.PersistentVolumeClaim](),
	"Lease":                 reflect.TypeFor[coordinationv1.Lease](),
}

// TestDocFieldPaths: every spec.* or status.* field path named in the docs
// exists in a CRD schema (or in the Kubernetes type it belongs to).
func TestDocFieldPaths(t *testing.T) {
	dir := root(t)
	schemas := crdSchemas(t, dir)
	docs, err := filepath.Glob(filepath.Join(dir, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(dir, "README.md"), filepath.Join(dir, "formal", "README.md"))
	checked := 0
	for _, file := range docs {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f := textFile{path: strings.TrimPrefix(file, dir+string(filepath.Separator)), data: data}
		for _, m := range fieldPath.FindAllSubmatchIndex(data, -1) {
			path := strings.Split(string(data[m[2]:m[3]]), ".")
			checked++
			found := false
			for _, s := range schemas {
				if schemaHas(s, path) {
					found = true
					break
				}
			}
			for _, typ := range kubeTypes {
				if !found && typeHas(typ, path) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s:%d: %s is a field of no CRD under config/crd/bases and of no Pod, PersistentVolumeClaim or Lease",
					f.path, f.line(m[2]), strings.Join(path, "."))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no field paths found in the docs: the pattern is broken")
	}
	t.Logf("%d field paths checked", checked)
}

// TestFieldPathLookup: the lookups refuse what does not exist.
func TestFieldPathLookup(t *testing.T) {
	schemas := crdSchemas(t, root(t))
	shard := schemas["FelixShard/v1alpha1"]
	if shard == nil {
		t.Fatal("no FelixShard/v1alpha1 schema")
	}
	for path, want := range map[string]bool{
		"status.assignment.leader": true,
		"status.report":            true,
		"spec.stream":              true,
		"status.assignment.nobody": false,
		"spec.advertise":           false,
	} {
		if got := schemaHas(shard, strings.Split(path, ".")); got != want {
			t.Errorf("FelixShard %s: found %v, want %v", path, got, want)
		}
	}
	pod := kubeTypes["Pod"]
	for path, want := range map[string]bool{"spec.nodeName": true, "status.podIP": true, "spec.containers.image": true, "spec.podIP": false} {
		if got := typeHas(pod, strings.Split(path, ".")); got != want {
			t.Errorf("Pod %s: found %v, want %v", path, got, want)
		}
	}
}
