package helm

import (
	"bufio"
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	lintv3 "helm.sh/helm/v3/pkg/lint"
	supportv3 "helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// Artifact Hub's annotations (https://artifacthub.io/docs/topics/annotations/helm/).
const (
	ahLicense    = "artifacthub.io/license"
	ahCategory   = "artifacthub.io/category"
	ahLinks      = "artifacthub.io/links"
	ahImages     = "artifacthub.io/images"
	ahChanges    = "artifacthub.io/changes"
	ahPrerelease = "artifacthub.io/prerelease"
	ahSecurity   = "artifacthub.io/containsSecurityUpdates"
)

// perRelease are the annotations make release writes (hack/helm/annotate.sh).
var perRelease = []string{ahImages, ahChanges, ahPrerelease, ahSecurity}

// TestArtifactHubAnnotations holds the chart's own annotations to what
// Artifact Hub reads: the license of LICENSE, one of its categories, links
// that are https URLs with a name, a maintainer; and none of a release's,
// which make release writes.
func TestArtifactHubAnnotations(t *testing.T) {
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	chart, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	annotations := chart.Metadata.Annotations
	license, err := fixtures.Path("LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(license); err != nil || !bytes.Contains(b, []byte("Apache License\n                           Version 2.0")) {
		t.Errorf("LICENSE is not the Apache License 2.0 (%v): artifacthub.io/license names it", err)
	}
	if got := annotations[ahLicense]; got != "Apache-2.0" {
		t.Errorf("%s: %q, want Apache-2.0, LICENSE's and the image's org.opencontainers.image.licenses", ahLicense, got)
	}
	categories := []string{"ai-machine-learning", "database", "integration-delivery", "monitoring-logging", "networking",
		"security", "storage", "streaming-messaging"}
	if got := annotations[ahCategory]; !slices.Contains(categories, got) {
		t.Errorf("%s: %q, want one of Artifact Hub's: %v", ahCategory, got, categories)
	}
	var links []struct{ Name, URL string }
	if err := yaml.UnmarshalStrict([]byte(annotations[ahLinks]), &links); err != nil || len(links) == 0 {
		t.Errorf("%s: %v, %d links; want a list of name and url", ahLinks, err, len(links))
	}
	for _, link := range links {
		if u, err := url.Parse(link.URL); err != nil || u.Scheme != "https" || link.Name == "" {
			t.Errorf("%s: %+v: want a name and an https URL", ahLinks, link)
		}
	}
	if len(chart.Metadata.Maintainers) == 0 {
		t.Error("Chart.yaml names no maintainer")
	}
	for _, key := range perRelease {
		if _, ok := annotations[key]; ok {
			t.Errorf("Chart.yaml holds %s, which make release writes (hack/helm/annotate.sh)", key)
		}
	}
}

// TestArtifactHubRepositoryMetadata holds artifacthub-repo.yml, which a
// maintainer pushes to the chart's repository, to Artifact Hub's fields: a
// misspelt one fails here rather than be ignored there.
func TestArtifactHubRepositoryMetadata(t *testing.T) {
	path, err := fixtures.Path("artifacthub-repo.yml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var metadata struct {
		RepositoryID string `json:"repositoryID"`
		Owners       []struct {
			Name  string `json:"name"`
			Email string `json:"email"`
		} `json:"owners"`
		Ignore []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"ignore"`
	}
	if err := yaml.UnmarshalStrict(b, &metadata); err != nil {
		t.Fatalf("artifacthub-repo.yml: %v", err)
	}
	if id := metadata.RepositoryID; id != "" && !regexp.MustCompile(`^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Errorf("artifacthub-repo.yml: repositoryID %q is no UUID, as Artifact Hub gives", id)
	}
	for _, owner := range metadata.Owners {
		if !strings.Contains(owner.Email, "@") {
			t.Errorf("artifacthub-repo.yml: owner %q has no e-mail, by which Artifact Hub knows its users", owner.Name)
		}
	}
}

// change is an entry of artifacthub.io/changes.
type change struct{ Kind, Description string }

// TestReleaseAnnotations runs make release's hack/helm/annotate.sh on a copy
// of the chart, as make release does before it packages it: for the newest
// release of CHANGELOG.md, its section, and for a version without a section
// (make release-check's), [Unreleased]'s; the image pinned to its digest,
// with both platforms. The chart it writes passes helm lint --strict.
func TestReleaseAnnotations(t *testing.T) {
	root, err := fixtures.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	changelog := filepath.Join(root, "CHANGELOG.md")
	newest := regexp.MustCompile(`(?m)^## \[(v[^\]]+)\]`)
	text, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	m := newest.FindSubmatch(text)
	if m == nil {
		t.Fatal("CHANGELOG.md: no release heading such as ## [v0.1.0]")
	}
	digest := "sha256:" + strings.Repeat("0f", 32)
	for _, tc := range []struct {
		version, section, prerelease string
	}{
		{version: string(m[1]), section: string(m[1]), prerelease: "false"},
		{version: "v0.0.0-check", section: "Unreleased", prerelease: "true"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			dir := copyChart(t)
			image := "ghcr.io/flyteorg/flyte-mpi-webhook:" + tc.version + "@" + digest
			if out, err := annotate(root, dir, tc.version, image, changelog); err != nil {
				t.Fatalf("hack/helm/annotate.sh: %v\n%s", err, out)
			}
			chart, err := loader.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			annotations := chart.Metadata.Annotations

			var images []struct {
				Name, Image string
				Platforms   []string
			}
			if err := yaml.UnmarshalStrict([]byte(annotations[ahImages]), &images); err != nil {
				t.Fatalf("%s: %v", ahImages, err)
			}
			if diff := cmp.Diff(`[{flyte-mpi-webhook `+image+` [linux/amd64 linux/arm64]}]`, fmtImages(images)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", ahImages, diff)
			}

			var changes []change
			if err := yaml.UnmarshalStrict([]byte(annotations[ahChanges]), &changes); err != nil {
				t.Fatalf("%s: %v", ahChanges, err)
			}
			if diff := cmp.Diff(sectionEntries(t, text, tc.section), changes); diff != "" {
				t.Errorf("%s, against CHANGELOG.md's ## [%s] (-want +got):\n%s", ahChanges, tc.section, diff)
			}
			if got := annotations[ahPrerelease]; got != tc.prerelease {
				t.Errorf("%s: %q, want %q", ahPrerelease, got, tc.prerelease)
			}
			if got := annotations[ahSecurity]; got != "false" {
				t.Errorf("%s: %q, want false: no ### Security", ahSecurity, got)
			}

			linter := lintv3.All(dir, withImage(), Namespace, false)
			for _, msg := range linter.Messages {
				t.Log(msg)
			}
			if linter.HighestSeverity >= supportv3.WarningSev {
				t.Errorf("helm lint --strict fails on the annotated chart")
			}
		})
	}
	t.Run("a security fix", func(t *testing.T) {
		dir := copyChart(t)
		security := filepath.Join(t.TempDir(), "CHANGELOG.md")
		if err := os.WriteFile(security, []byte("## [v9.9.9]\n\n### Security\n- A \"quoted\" fix\n  of `two` lines.\n\n## [v9.9.8]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := annotate(root, dir, "v9.9.9", "r/i:v9.9.9@"+digest, security); err != nil {
			t.Fatalf("hack/helm/annotate.sh: %v\n%s", err, out)
		}
		chart, err := loader.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var changes []change
		if err := yaml.UnmarshalStrict([]byte(chart.Metadata.Annotations[ahChanges]), &changes); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]change{{"security", "A \"quoted\" fix of `two` lines."}}, changes); diff != "" {
			t.Errorf("%s (-want +got):\n%s", ahChanges, diff)
		}
		if got := chart.Metadata.Annotations[ahSecurity]; got != "true" {
			t.Errorf("%s: %q, want true", ahSecurity, got)
		}
	})
	for name, args := range map[string][]string{
		"an image without its digest": {"v1.0.0", "r/i:v1.0.0", changelog},
		"twice":                       {"v1.0.0", "r/i:v1.0.0@" + digest, changelog},
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			dir := copyChart(t)
			if name == "twice" {
				if out, err := annotate(root, dir, args...); err != nil {
					t.Fatalf("hack/helm/annotate.sh: %v\n%s", err, out)
				}
			}
			before, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if out, err := annotate(root, dir, args...); err == nil {
				t.Errorf("hack/helm/annotate.sh succeeded; want it refused\n%s", out)
			}
			if after, err := os.ReadFile(filepath.Join(dir, "Chart.yaml")); err != nil || !bytes.Equal(before, after) {
				t.Errorf("hack/helm/annotate.sh changed Chart.yaml as it failed (%v)", err)
			}
		})
	}
}

// copyChart copies the chart into a temporary directory, as make release
// does, and returns the copy's directory.
func copyChart(t *testing.T) string {
	t.Helper()
	src, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "flyte-mpi-webhook")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// annotate runs hack/helm/annotate.sh on the Chart.yaml in dir with
// version, image and changelog, and make release's platforms.
func annotate(root, dir string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "helm", "annotate.sh"),
		append(append([]string{filepath.Join(dir, "Chart.yaml")}, args...), "linux/amd64", "linux/arm64")...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fmtImages prints images as fmt's %v does, for one comparison.
func fmtImages(images []struct {
	Name, Image string
	Platforms   []string
}) string {
	var parts []string
	for _, i := range images {
		parts = append(parts, "{"+i.Name+" "+i.Image+" ["+strings.Join(i.Platforms, " ")+"]}")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// sectionEntries reads CHANGELOG.md's section ## [section] as Artifact Hub's
// changes: each "- " entry with its continuation lines joined, its kind the
// ### heading above it, lower-cased.
func sectionEntries(t *testing.T, changelog []byte, section string) []change {
	t.Helper()
	var out []change
	var kind string
	in := false
	scanner := bufio.NewScanner(bytes.NewReader(changelog))
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			if in {
				return out
			}
			in = strings.HasPrefix(line, "## ["+section+"]")
		case !in:
		case strings.HasPrefix(line, "### "):
			kind = strings.ToLower(strings.TrimPrefix(line, "### "))
		case strings.HasPrefix(line, "- "):
			out = append(out, change{kind, strings.TrimPrefix(line, "- ")})
		case strings.HasPrefix(line, "  ") && len(out) > 0 && strings.TrimSpace(line) != "":
			out[len(out)-1].Description += " " + strings.TrimSpace(line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("CHANGELOG.md: no entries under ## [%s]", section)
	}
	return out
}
