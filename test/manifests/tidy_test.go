package manifests_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTidyCheck runs make tidy-check's script on a repository of three
// modules, one of which requires a module it does not import, and one more
// that .gitignore hides: it must name the untidy one, with the diff, leave
// its go.mod as it was, and pass once the module is tidied.
func TestTidyCheck(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: hack/tidy-check.sh lists the modules with git ls-files")
	}
	repo := t.TempDir()
	script, err := os.ReadFile(filepath.Join(repoRoot, "hack", "tidy-check.sh"))
	if err != nil {
		t.Fatal(err)
	}
	untidy := "module example.com/untidy\n\ngo 1.26.0\n\nrequire example.com/unused v0.0.0\n\nreplace example.com/unused => ../unused\n"
	files := map[string]string{
		"hack/tidy-check.sh":  string(script),
		".gitignore":          "/bin/\n",
		"go.mod":              "module example.com/root\n\ngo 1.26.0\n",
		"main.go":             "package main\n\nfunc main() {}\n",
		"untidy/go.mod":       untidy,
		"untidy/untidy.go":    "package untidy\n",
		"unused/go.mod":       "module example.com/unused\n\ngo 1.26.0\n",
		"unused/unused.go":    "package unused\n",
		"bin/ignored/go.mod":  "module example.com/ignored\n\ngo 1.26.0\n\nrequire example.com/unused v0.0.0\n\nreplace example.com/unused => ../../unused\n",
		"bin/ignored/main.go": "package main\n\nfunc main() {}\n",
	}
	for name, content := range files {
		path := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(repo, "hack", "tidy-check.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = repo
		// Every module is local: no download, whatever the machine's proxy.
		cmd.Env = append(os.Environ(), "GOPROXY=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("git", "init", "--quiet"); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}

	out, err := run("hack/tidy-check.sh")
	if err == nil {
		t.Fatalf("hack/tidy-check.sh passed, want it to fail on untidy/go.mod; output:\n%s", out)
	}
	for _, want := range []string{"untidy/go.mod: go mod tidy would change:", "-require example.com/unused v0.0.0", "untidy/go.mod is not tidy: run go -C untidy mod tidy"} {
		if !strings.Contains(out, want) {
			t.Errorf("hack/tidy-check.sh printed no %q; output:\n%s", want, out)
		}
	}
	for _, notWant := range []string{"bin/ignored", "./go.mod", "unused/go.mod"} {
		if strings.Contains(out, notWant) {
			t.Errorf("hack/tidy-check.sh named %s, which is ignored or tidy; output:\n%s", notWant, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(repo, "untidy", "go.mod")); err != nil || string(b) != untidy {
		t.Errorf("hack/tidy-check.sh changed untidy/go.mod to %q (%v), want it left as it was", b, err)
	}

	if out, err := run("go", "-C", "untidy", "mod", "tidy"); err != nil {
		t.Fatalf("go mod tidy in untidy: %v\n%s", err, out)
	}
	if out, err := run("hack/tidy-check.sh"); err != nil || !strings.Contains(out, "3 modules tidy") {
		t.Errorf("hack/tidy-check.sh once untidy/ is tidied: %v, want it to pass on 3 modules; output:\n%s", err, out)
	}
}
