package manifests_test

// No Docker engine runs the tests, so these check everything around the
// Dockerfile instead: that it builds what the Deployment runs, as a user the
// pod's securityContext accepts, from a context that holds every file the
// build reads.

import (
	"encoding/json"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
)

// repoRoot is the repository's root, seen from this package.
var repoRoot = filepath.Join("..", "..")

// stage is one FROM of the Dockerfile: its image (without "AS name"), and
// the arguments of each instruction under it, by upper-case instruction.
type stage struct {
	from         string
	instructions map[string][]string
}

// readDockerfile reads the Dockerfile's stages: comments and blank lines
// dropped, continuation lines joined. That is all of the syntax it uses.
func readDockerfile(t *testing.T) []stage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	var lines []string
	for _, line := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	for _, line := range lines {
		command, args, _ := strings.Cut(line, " ")
		command, args = strings.ToUpper(command), strings.TrimSpace(args)
		switch {
		case command == "FROM":
			stages = append(stages, stage{from: strings.Fields(args)[0], instructions: map[string][]string{}})
		case len(stages) == 0:
			t.Fatalf("Dockerfile: %s before the first FROM", command)
		default:
			stages[len(stages)-1].instructions[command] = append(stages[len(stages)-1].instructions[command], args)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a final one", len(stages))
	}
	return stages
}

func TestImageRunsWhatTheDeploymentRuns(t *testing.T) {
	stages := readDockerfile(t)
	final := stages[len(stages)-1]
	deployment := decode[appsv1.Deployment](t, render(t, filepath.Join(configDir, "default"), ""), "Deployment")

	if !strings.Contains(final.from, "/distroless/static") || !strings.HasSuffix(final.from, ":nonroot") {
		t.Errorf("final stage FROM %s, want distroless static, nonroot", final.from)
	}
	// runAsNonRoot needs a numeric user: the kubelet cannot check a name.
	if diff := cmp.Diff([]string{"65532:65532"}, final.instructions["USER"]); diff != "" {
		t.Errorf("final stage USER (-want +got):\n%s", diff)
	}
	entrypoints := final.instructions["ENTRYPOINT"]
	if len(entrypoints) != 1 {
		t.Fatalf("final stage ENTRYPOINT %q, want one", entrypoints)
	}
	var entrypoint []string
	if err := json.Unmarshal([]byte(entrypoints[0]), &entrypoint); err != nil {
		t.Fatalf("ENTRYPOINT %s: want the exec form, a JSON list: %v", entrypoints[0], err)
	}
	for _, c := range deployment.Spec.Template.Spec.Containers {
		if c.Command != nil {
			if diff := cmp.Diff(entrypoint, c.Command); diff != "" {
				t.Errorf("container %s: command, against the image's ENTRYPOINT (-want +got):\n%s", c.Name, diff)
			}
		}
	}

	builds := slices.DeleteFunc(slices.Clone(stages[0].instructions["RUN"]), func(run string) bool { return !strings.Contains(run, "go build") })
	if len(builds) != 1 {
		t.Fatalf("build stage: %d RUN go build, want one: %q", len(builds), builds)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/webhook", "-o webhook"} {
		if !strings.Contains(builds[0], want) {
			t.Errorf("build stage: RUN %s: no %s", builds[0], want)
		}
	}
}

func TestImageBuildsWithTheGoOfGoMod(t *testing.T) {
	builder := readDockerfile(t)[0].from
	image, tag, _ := strings.Cut(builder, ":")
	if image != "golang" {
		t.Fatalf("build stage FROM %s, want golang", builder)
	}
	goMod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goVersion string
	for _, line := range strings.Split(string(goMod), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			goVersion = strings.TrimSpace(v)
		}
	}
	got, want := "go"+tag, "go"+goVersion
	if version.Lang(got) == got {
		want = version.Lang(want) // golang:1.26 is the newest 1.26.x
	}
	if !version.IsValid(got) || version.Compare(got, want) < 0 {
		t.Errorf("build stage FROM %s: not a Go version, or older than go.mod's go %s", builder, goVersion)
	}
}

func TestDockerignoreLetsInWhatTheBuildReads(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	if len(patterns) == 0 || patterns[0] != "*" {
		t.Fatalf(".dockerignore %q: want * first, denying everything", patterns)
	}
	var included []string
	for _, p := range patterns[1:] {
		path, ok := strings.CutPrefix(p, "!")
		if !ok || strings.ContainsAny(path, "*?[") {
			t.Fatalf(".dockerignore: %q: after *, want only re-included paths, !PATH", p)
		}
		included = append(included, path)
	}

	// The build stage copies exactly what .dockerignore lets in.
	var copied []string
	for _, c := range readDockerfile(t)[0].instructions["COPY"] {
		if fields := strings.Fields(c); !strings.HasPrefix(fields[0], "--from") {
			copied = append(copied, fields[:len(fields)-1]...)
		}
	}
	slices.Sort(included)
	slices.Sort(copied)
	if diff := cmp.Diff(included, copied); diff != "" {
		t.Errorf("build stage COPY sources, against .dockerignore's re-included paths (-want +got):\n%s", diff)
	}

	// Every file of this module that `go build ./cmd/webhook` reads is let in.
	for _, file := range append(buildFiles(t), "go.mod", "go.sum") {
		if !slices.ContainsFunc(included, func(path string) bool {
			return file == strings.TrimSuffix(path, "/") || strings.HasPrefix(file, strings.TrimSuffix(path, "/")+"/")
		}) {
			t.Errorf("%s: the image build reads it, .dockerignore keeps it out", file)
		}
	}
}

// buildFiles lists, relative to the repository root, the files of this
// module that the image's `go build ./cmd/webhook` compiles or embeds.
func buildFiles(t *testing.T) []string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	const format = `{{if and .Module .Module.Main}}{{$dir := .Dir}}` +
		`{{range .GoFiles}}{{$dir}}/{{.}} {{end}}{{range .EmbedFiles}}{{$dir}}/{{.}} {{end}}{{end}}`
	cmd := exec.Command("go", "list", "-deps", "-f", format, "./cmd/webhook")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0") // as in the Dockerfile
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var files []string
	for _, path := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) == 0 {
		t.Fatal("go list: no file of this module in ./cmd/webhook's build")
	}
	return files
}
