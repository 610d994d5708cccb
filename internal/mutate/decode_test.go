package mutate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestDecodeJob checks what a JobDecoder keeps of an MPIJob: the labels the
// selector reads, this webhook's annotations, and the first MaxContainers
// containers; whether annotations are present matters to the patch.
func TestDecodeJob(t *testing.T) {
	object := func(metadata, containers string) string {
		return `{"apiVersion":"kubeflow.org/v1","kind":"MPIJob","metadata":` + metadata +
			`,"spec":{"mpiReplicaSpecs":{"Worker":{"template":{"metadata":{"annotations":{"mpi.flyte.org/task-custom":"w","x":"y"}},` +
			`"spec":{"containers":` + containers + `}}}}}}`
	}
	many := make([]string, MaxContainers+5)
	for i := range many {
		many[i] = fmt.Sprintf(`{"name":"c%d","image":"i"}`, i)
	}
	wantMany := make(Containers, MaxContainers)
	for i := range wantMany {
		wantMany[i] = Container{Name: fmt.Sprintf("c%d", i)}
	}
	for _, tt := range []struct {
		name                        string
		selector                    string
		object                      string
		wantLabels, wantAnnotations map[string]string
		wantContainers              Containers
	}{{
		name:     "only the selector's labels and this webhook's annotations",
		selector: "execution-id,task-name,team notin (a)",
		object: object(`{"labels":{"execution-id":"e","task-name":"t","node-id":"n0","team":"b"},`+
			`"annotations":{"mpi.flyte.org/worker-spec-command":"sshd","kubectl.kubernetes.io/last-applied-configuration":"{}","other":"1"}}`,
			`[{"name":"mpi","command":["sshd"],"env":[{"name":"A","value":"B"}]}]`),
		wantLabels:      map[string]string{"execution-id": "e", "task-name": "t", "team": "b"},
		wantAnnotations: map[string]string{AnnotationWorkerSpecCommand: "sshd"},
		wantContainers:  Containers{{Name: "mpi", Command: list("sshd")}},
	}, {
		name:            "annotations without this webhook's keys: present, empty",
		selector:        DefaultFlyteTaskSelector,
		object:          object(`{"labels":{"execution-id":"e"},"annotations":{"other":"1"}}`, `[]`),
		wantLabels:      map[string]string{"execution-id": "e"},
		wantAnnotations: map[string]string{},
		wantContainers:  Containers{},
	}, {
		name:           "annotations null, no labels",
		selector:       DefaultFlyteTaskSelector,
		object:         object(`{"annotations":null}`, `null`),
		wantLabels:     map[string]string{},
		wantContainers: nil,
	}, {
		name:           "the first MaxContainers containers",
		selector:       DefaultFlyteTaskSelector,
		object:         object(`{}`, "["+strings.Join(many, ",")+"]"),
		wantLabels:     map[string]string{},
		wantContainers: wantMany,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			selector, err := labels.Parse(tt.selector)
			if err != nil {
				t.Fatal(err)
			}
			job, err := NewJobDecoder(selector).Decode([]byte(tt.object))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantLabels, job.Metadata.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(Annotations(tt.wantAnnotations), job.Metadata.Annotations); diff != "" {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(Annotations{AnnotationTaskCustom: "w"}, job.Spec.MPIReplicaSpecs.Worker.Template.Metadata.Annotations); diff != "" {
				t.Errorf("worker annotations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantContainers, job.Spec.MPIReplicaSpecs.Worker.Template.Spec.Containers); diff != "" {
				t.Errorf("containers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeJobAllocatesForWhatItKeeps checks that a flood of containers,
// labels or annotations costs a JobDecoder no more allocations than a handful:
// what it skips, it does not allocate.
func TestDecodeJobAllocatesForWhatItKeeps(t *testing.T) {
	jobs := NewJobDecoder(DefaultOptions().FlyteTaskSelector)
	allocs := func(object []byte) float64 {
		return testing.AllocsPerRun(5, func() {
			if _, err := jobs.Decode(object); err != nil {
				t.Fatal(err)
			}
		})
	}
	few, lots := allocs(fixtures.FloodedMPIJob(MaxContainers)), allocs(fixtures.FloodedMPIJob(100*MaxContainers))
	if lots > few+10 {
		t.Errorf("%v allocations for %d containers, labels and annotations; %v for %d", lots, 100*MaxContainers, few, MaxContainers)
	}
}

// TestJobTarget checks that a job decoded in the pass over a document that
// holds it is the job Decode decodes, and that null or no job is none.
func TestJobTarget(t *testing.T) {
	jobs := NewJobDecoder(DefaultOptions().FlyteTaskSelector)
	const object = `{"apiVersion":"kubeflow.org/v1","kind":"MPIJob","metadata":{"labels":{"execution-id":"e","x":"y"},` +
		`"annotations":{"mpi.flyte.org/worker-spec-command":"sshd"}},"spec":{"mpiReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"mpi"}]}}}}}}`
	want, err := jobs.Decode([]byte(object))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		document string
		want     *Job
	}{
		{"a job", `{"job":` + object + `}`, want},
		{"null", `{"job":null}`, nil},
		{"no job", `{"other":1}`, nil},
		{"an empty object", `{"job":{}}`, &Job{Metadata: Metadata{Labels: map[string]string{}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			target := jobs.Target()
			document := struct {
				Job any `json:"job"`
			}{target.Into()}
			if err := json.Unmarshal([]byte(tt.document), &document); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, target.Job()); diff != "" {
				t.Errorf("Job() (-Decode +Target):\n%s", diff)
			}
		})
	}
}
