package mutate

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// releaseDecision is what the webhook does with the MPIJob one Flyte
// release's backend builds for one task: the decision, and the worker's MPI
// container as the API server stores it after the patch.
type releaseDecision struct {
	Outcome   Outcome
	Source    Source
	Container int
	// Command and Args are the stored worker container's; Args is nil when the patch moved them.
	Command, Args []string
}

// flyteReleases are the Flyte releases whose backend built testdata/flyte
// (hack/flyte-testdata and hack/flyte-testdata/releases), oldest first.
var flyteReleases = []string{"v1.9.12", "v1.10.6", "v1.13.0", "v1.14.0", "v1.14.1", "v1.15.2", "v1.15.3", "v1.16.7", fixtures.NewestFlyteRelease}

// TestFlyteReleases holds the webhook's decision on the MPIJob that each
// Flyte release's backend builds for each task to the source
// fixtures.FlyteExpected gives it (which says why a release differs), under
// config/default's options (the defaults), decoded and decided on as the
// handler does it. Compatibility with a Flyte release, as
// docs/COMPATIBILITY.md states it, is measured here; test/envtest holds the
// admission policy to the same jobs.
func TestFlyteReleases(t *testing.T) {
	releases, err := fixtures.FlyteReleases()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(flyteReleases, releases); diff != "" {
		t.Fatalf("the releases of testdata/flyte are not the ones this test knows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(flyteReleases, documentedReleases(t)); diff != "" {
		t.Errorf("docs/COMPATIBILITY.md's Flyte rows are not the releases this test measures (-measured +documented):\n%s", diff)
	}
	opts := DefaultOptions() // as config/default runs it
	jobs := NewJobDecoder(opts.FlyteTaskSelector)

	for _, release := range releases {
		for _, task := range fixtures.FlyteJobs {
			t.Run(release+"/"+task, func(t *testing.T) {
				job, err := fixtures.FlyteReleaseJob(release, task)
				if err != nil {
					t.Fatal(err)
				}
				sent := fixtures.MustJSON(job)
				decoded, err := jobs.Decode(sent)
				if err != nil {
					t.Fatal(err)
				}
				d := Decide(decoded, opts)
				if len(d.Warnings) > 0 || d.Err != nil {
					t.Errorf("warnings %q, error %v; want neither", d.Warnings, d.Err)
				}
				got := releaseDecision{Outcome: d.Outcome, Source: d.Source, Container: d.Container}
				got.Command, got.Args = storedWorker(t, sent, d)

				expected, ok := fixtures.FlyteExpected(release, task)
				if !ok {
					t.Fatalf("fixtures.FlyteExpected has no expectation for the task %s", task)
				}
				want := releaseDecision{Outcome: OutcomeMutated, Source: Source(expected.Webhook), Container: 0, Command: fixtures.SSHD}
				if want.Source == SourceNone {
					want = releaseDecision{Outcome: OutcomeUnchanged, Source: SourceNone, Container: -1}
					_, want.Args = storedWorker(t, sent, Decision{}) // the args Flyte gave it
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Flyte %s, task %s: the webhook's decision (-want +got):\n%s", release, task, diff)
				}
			})
		}
	}
}

// documentedRow is a Flyte row of docs/COMPATIBILITY.md's table: "| 1.16.8 | ...".
var documentedRow = regexp.MustCompile(`^\| (\d+\.\d+\.\d+) \|`)

// documentedReleases returns the releases of docs/COMPATIBILITY.md's Flyte
// rows, oldest first, as v-prefixed versions.
func documentedReleases(t *testing.T) []string {
	t.Helper()
	path, err := fixtures.Path("docs", "COMPATIBILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var releases []string
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = line
		}
		if m := documentedRow.FindStringSubmatch(line); m != nil && section == "## Flyte rows" {
			releases = append([]string{"v" + m[1]}, releases...) // the table lists the newest first
		}
	}
	return releases
}

// applied is the MPIJob sent with the decision's patch applied, as the API
// server stores it.
func applied(t *testing.T, sent []byte, d Decision) []byte {
	t.Helper()
	if len(d.Patch) == 0 {
		return sent
	}
	ops, err := json.Marshal(d.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatchapply.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := patch.Apply(sent)
	if err != nil {
		t.Fatalf("applying the patch %s: %v", ops, err)
	}
	return stored
}

// storedWorker applies the decision's patch to the MPIJob sent and returns
// the command and args of the Worker's first container, as the API server
// stores them.
func storedWorker(t *testing.T, sent []byte, d Decision) (command, args []string) {
	t.Helper()
	stored := applied(t, sent, d)
	var job struct {
		Spec struct {
			MPIReplicaSpecs struct {
				Worker struct {
					Template struct {
						Spec struct {
							Containers []struct {
								Command []string `json:"command"`
								Args    []string `json:"args"`
							} `json:"containers"`
						} `json:"spec"`
					} `json:"template"`
				} `json:"Worker"`
			} `json:"mpiReplicaSpecs"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(stored, &job); err != nil {
		t.Fatal(err)
	}
	containers := job.Spec.MPIReplicaSpecs.Worker.Template.Spec.Containers
	if len(containers) == 0 {
		t.Fatal("the stored MPIJob has no Worker container")
	}
	return containers[0].Command, containers[0].Args
}
