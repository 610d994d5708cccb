package manifests_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDependabotCheck runs make dependabot-check's script on this
// repository, which must pass, and on a repository of its own: a module that
// .github/dependabot.yml does not list and the script does not hold fails,
// naming it, as does a listed directory without a go.mod and a held module
// that is listed too; once listed, the new module passes.
func TestDependabotCheck(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: hack/dependabot-check.sh lists the modules with git ls-files")
	}
	if out, err := exec.Command(filepath.Join(repoRoot, "hack", "dependabot-check.sh")).CombinedOutput(); err != nil {
		t.Fatalf("hack/dependabot-check.sh on this repository: %v\n%s", err, out)
	}

	script, err := os.ReadFile(filepath.Join(repoRoot, "hack", "dependabot-check.sh"))
	if err != nil {
		t.Fatal(err)
	}
	config := func(dirs ...string) string {
		return "version: 2\nupdates:\n- package-ecosystem: gomod\n  directories:\n  - " + strings.Join(dirs, "\n  - ") +
			"\n  schedule:\n    interval: weekly\n- package-ecosystem: github-actions\n  directory: /hack/new\n"
	}
	for _, tc := range []struct {
		name string
		// dirs are the gomod directories .github/dependabot.yml lists.
		dirs []string
		// want are what the script prints; none when it passes.
		want []string
	}{
		{name: "a new module, not listed", dirs: []string{"/", "/hack/tools"},
			want: []string{"hack/new/go.mod: not in .github/dependabot.yml's gomod directories: add /hack/new there"}},
		{name: "a listed directory without a module", dirs: []string{"/", "/hack/tools", "/hack/new", "/hack/gone"},
			want: []string{"lists /hack/gone, which has no go.mod"}},
		{name: "a held module, listed", dirs: []string{"/", "/hack/tools", "/hack/new", "/hack/envtest"},
			want: []string{"hack/envtest is held at an upstream release"}},
		{name: "every module listed or held", dirs: []string{"/", "/hack/tools", "/hack/new"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := t.TempDir()
			files := map[string]string{
				"hack/dependabot-check.sh":             string(script),
				".github/dependabot.yml":               config(tc.dirs...),
				".gitignore":                           "/bin/\n",
				"go.mod":                               "module example.com/root\n",
				"hack/tools/go.mod":                    "module example.com/tools\n",
				"hack/new/go.mod":                      "module example.com/new\n",
				"hack/envtest/go.mod":                  "module example.com/envtest\n",
				"hack/envtest/releases/v1.32.1/go.mod": "module example.com/envtest/v1.32.1\n",
				"bin/ignored/go.mod":                   "module example.com/ignored\n",
			}
			for name, content := range files {
				path := filepath.Join(repo, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := exec.Command("git", "-C", repo, "init", "--quiet").CombinedOutput(); err != nil {
				t.Fatalf("git init: %v\n%s", err, out)
			}
			out, err := exec.Command(filepath.Join(repo, "hack", "dependabot-check.sh")).CombinedOutput()
			if len(tc.want) == 0 {
				if err != nil || !strings.Contains(string(out), "5 modules: 3 updated weekly, 2 held") {
					t.Errorf("hack/dependabot-check.sh: %v, want it to pass on 5 modules; output:\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Errorf("hack/dependabot-check.sh passed, want it to fail; output:\n%s", out)
			}
			for _, want := range tc.want {
				if !strings.Contains(string(out), want) {
					t.Errorf("hack/dependabot-check.sh printed no %q; output:\n%s", want, out)
				}
			}
			if strings.Contains(string(out), "bin/ignored") {
				t.Errorf("hack/dependabot-check.sh named bin/ignored, which .gitignore hides; output:\n%s", out)
			}
		})
	}
}
