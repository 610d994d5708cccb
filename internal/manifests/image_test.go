package manifests_test

// No Docker engine runs the tests, so these check everything around the
// Dockerfile instead: that it builds what the Deployment runs, as a user the
// pod's securityContext accepts, from a context that holds every file the
// build reads.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
)

// repoRoot is the repository's root, seen from this package.
var repoRoot = filepath.Join("..", "..")

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	command string // upper case: FROM, COPY, RUN...
	args    string
}

// stage is one FROM of a Dockerfile and the instructions under it.
type stage struct {
	from         string // the image, without "AS name"
	instructions []instruction
}

func readDockerfile(t *testing.T) []stage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	var line strings.Builder
	scanner := bufio.NewScanner(bytes.NewReader(b))
	for scanner.Scan() {
		text := strings.TrimSpace(scanner.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if cut, ok := strings.CutSuffix(text, `\`); ok {
			line.WriteString(cut + " ")
			continue
		}
		line.WriteString(text)
		command, args, _ := strings.Cut(line.String(), " ")
		line.Reset()
		in := instruction{command: strings.ToUpper(command), args: strings.TrimSpace(args)}
		if in.command == "FROM" {
			stages = append(stages, stage{from: strings.Fields(in.args)[0]})
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %s before the first FROM", in.command)
		}
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a final one", len(stages))
	}
	return stages
}

// find returns the arguments of every instruction of a stage with command.
func (s stage) find(command string) []string {
	var found []string
	for _, in := range s.instructions {
		if in.command == command {
			found = append(found, in.args)
		}
	}
	return found
}

func TestImageRunsWhatTheDeploymentRuns(t *testing.T) {
	stages := readDockerfile(t)
	final := stages[len(stages)-1]
	deployment := decode[appsv1.Deployment](t, render(t, filepath.Join(configDir, "default"), ""), "Deployment")

	if !strings.Contains(final.from, "/distroless/static") || !strings.HasSuffix(final.from, ":nonroot") {
		t.Errorf("final stage FROM %s, want distroless static, nonroot", final.from)
	}
	// runAsNonRoot needs a numeric user: the kubelet cannot check a name.
	if diff := cmp.Diff([]string{"65532:65532"}, final.find("USER")); diff != "" {
		t.Errorf("final stage USER (-want +got):\n%s", diff)
	}
	entrypoints := final.find("ENTRYPOINT")
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

	builds := slices.DeleteFunc(stages[0].find("RUN"), func(run string) bool { return !strings.Contains(run, "go build") })
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
	if versionLess(tag, goVersion) {
		t.Errorf("build stage FROM %s: older than go.mod's go %s", builder, goVersion)
	}
}

// versionLess compares dotted versions, such as 1.26 and 1.26.0, a missing part counting as 0.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
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
	for _, c := range readDockerfile(t)[0].find("COPY") {
		fields := strings.Fields(c)
		if strings.HasPrefix(fields[0], "--from") {
			continue
		}
		copied = append(copied, fields[:len(fields)-1]...)
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
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,Module,GoFiles,EmbedFiles", "./cmd/webhook")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0") // as in the Dockerfile
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var files []string
	for decoder := json.NewDecoder(bytes.NewReader(out)); ; {
		var pkg struct {
			ImportPath, Dir     string
			Module              *struct{ Main bool }
			GoFiles, EmbedFiles []string
		}
		if err := decoder.Decode(&pkg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if pkg.Module == nil || !pkg.Module.Main {
			continue
		}
		dir, err := filepath.Rel(root, pkg.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(pkg.GoFiles, pkg.EmbedFiles...) {
			files = append(files, filepath.ToSlash(filepath.Join(dir, f)))
		}
	}
	if len(files) == 0 {
		t.Fatal("go list: no file of this module in ./cmd/webhook's build")
	}
	return files
}
