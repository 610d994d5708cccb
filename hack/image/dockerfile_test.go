package main

// The Dockerfile stays for those who build with Docker: it must build the
// image make image builds, with the same user, entrypoint and go build.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// dockerfileStage is one FROM of the Dockerfile: the arguments of each
// instruction under it, by upper-case instruction.
type dockerfileStage map[string][]string

// readDockerfile reads the Dockerfile's stages: comments and blank lines
// dropped, continuation lines joined. That is all of the syntax it uses.
func readDockerfile(t *testing.T) []dockerfileStage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerfileStage
	for line := range strings.SplitSeq(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instruction, args, _ := strings.Cut(line, " ")
		instruction = strings.ToUpper(instruction)
		if instruction == "FROM" {
			stages = append(stages, dockerfileStage{})
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %s before the first FROM", instruction)
		}
		stages[len(stages)-1][instruction] = append(stages[len(stages)-1][instruction], strings.TrimSpace(args))
	}
	if len(stages) != 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and the image", len(stages))
	}
	return stages
}

func TestDockerfileBuildsWhatMakeImageBuilds(t *testing.T) {
	stages := readDockerfile(t)
	build, final := stages[0], stages[1]

	if diff := cmp.Diff([]string{User}, final["USER"]); diff != "" {
		t.Errorf("Dockerfile USER, against make image's (-want +got):\n%s", diff)
	}
	var entrypoint []string
	if len(final["ENTRYPOINT"]) != 1 || json.Unmarshal([]byte(final["ENTRYPOINT"][0]), &entrypoint) != nil {
		t.Fatalf("Dockerfile ENTRYPOINT %q: want one, in the exec form (a JSON list)", final["ENTRYPOINT"])
	}
	if diff := cmp.Diff([]string{Entrypoint}, entrypoint); diff != "" {
		t.Errorf("Dockerfile ENTRYPOINT, against make image's (-want +got):\n%s", diff)
	}

	var builds []*syntax.CallExpr
	for _, run := range build["RUN"] {
		file, err := syntax.NewParser().Parse(strings.NewReader(run), "RUN")
		if err != nil {
			t.Fatalf("Dockerfile RUN %s: %v", run, err)
		}
		syntax.Walk(file, func(node syntax.Node) bool {
			if call, ok := node.(*syntax.CallExpr); ok && len(call.Args) > 1 && call.Args[0].Lit() == "go" && call.Args[1].Lit() == "build" {
				builds = append(builds, call)
			}
			return true
		})
	}
	if len(builds) != 1 {
		t.Fatalf("Dockerfile: %d go build commands, want one", len(builds))
	}
	// The build arguments expanded to markers, to compare with GoBuildArgs.
	env := expand.ListEnviron("VERSION=@VERSION@", "REVISION=@REVISION@", "TARGETOS=linux", "TARGETARCH=@ARCH@")
	cfg := &expand.Config{Env: env}
	var assigns, args []string
	for _, assign := range builds[0].Assigns {
		value, err := expand.Literal(cfg, assign.Value)
		if err != nil {
			t.Fatal(err)
		}
		assigns = append(assigns, assign.Name.Value+"="+value)
	}
	for _, word := range builds[0].Args[1:] {
		value, err := expand.Literal(cfg, word)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, value)
	}
	wantAssigns := append(append([]string{}, GoBuildEnv...), "GOOS=linux", "GOARCH=@ARCH@")
	if diff := cmp.Diff(wantAssigns, assigns); diff != "" {
		t.Errorf("Dockerfile go build's environment, against make image's (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(GoBuildArgs("@VERSION@", "@REVISION@", "webhook"), args); diff != "" {
		t.Errorf("Dockerfile go build's arguments, against make image's (-want +got):\n%s", diff)
	}
}
