package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/core"
	kubeflowmpi "github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/plugins/kubeflow"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// sampleWith writes the MPIJob Flyte builds for a Horovod task that declares
// no worker command (testdata/flyte/VERSION), with annotations added, to a
// temporary file.
func sampleWith(t *testing.T, version string, annotations map[string]string) string {
	t.Helper()
	job, err := fixtures.FlyteJob(version, fixtures.HorovodNoWorkerCommand)
	if err != nil {
		t.Fatal(err)
	}
	all := job.GetAnnotations()
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, annotations)
	job.SetAnnotations(all)
	out, err := yaml.Marshal(job.Object)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type workerContainer struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
}

// workerOf reads the first worker container of a YAML MPIJob.
func workerOf(t *testing.T, out []byte) workerContainer {
	t.Helper()
	var job struct {
		Spec struct {
			MPIReplicaSpecs map[string]struct {
				Template struct {
					Spec struct {
						Containers []workerContainer `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"mpiReplicaSpecs"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &job); err != nil {
		t.Fatalf("the output is not YAML: %v\n%s", err, out)
	}
	return job.Spec.MPIReplicaSpecs["Worker"].Template.Spec.Containers[0]
}

func TestPreview(t *testing.T) {
	for _, version := range []string{"v1", "v2beta1"} {
		t.Run(version, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runPreview([]string{"-f", sampleWith(t, version, map[string]string{mutate.AnnotationTaskCustom: fixtures.FlytekitCustom})},
				nil, &stdout, &stderr)
			if err != nil {
				t.Fatalf("preview: %v\n%s", err, &stderr)
			}
			if diff := cmp.Diff(workerContainer{Name: "mpi", Command: fixtures.WorkerCommand}, workerOf(t, stdout.Bytes())); diff != "" {
				t.Errorf("worker (-want +got):\n%s", diff)
			}
			wantDecision := "outcome:   mutated\nsource:    task-custom\ncontainer: mpi (worker container 0)\n" +
				"command:   " + fixtures.WorkerCommandLine + "\nargs:      (none)\n"
			if diff := cmp.Diff(wantDecision, stderr.String()); diff != "" {
				t.Errorf("decision on stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPreviewFlyteJobs previews the MPIJobs Flyte builds, as they are: a
// task that declares its worker command needs no annotation.
func TestPreviewFlyteJobs(t *testing.T) {
	cases := map[string]struct {
		job          string
		flags        []string
		wantDecision string
		wantWorker   workerContainer // none: the worker as Flyte built it
	}{
		"Worker(command=sshd)": {
			job:          fixtures.HorovodWorkerCommand,
			wantDecision: "outcome:   mutated\nsource:    flyte-worker-args\ncontainer: mpi (worker container 0)\ncommand:   " + fixtures.SSHDLine + "\n",
			wantWorker:   workerContainer{Name: "mpi", Command: fixtures.SSHD},
		},
		"no worker command": {
			job:          fixtures.HorovodNoWorkerCommand,
			wantDecision: "outcome:   unchanged\n",
		},
		"a plain MPI task": {
			job:          fixtures.MPIPlain,
			wantDecision: "outcome:   unchanged\n",
		},
		"no worker command, with --fallback-worker-command": {
			job:          fixtures.HorovodNoWorkerCommand,
			flags:        []string{"--fallback-worker-command", fixtures.WorkerCommandLine},
			wantDecision: "outcome:   mutated\nsource:    fallback\ncontainer: mpi (worker container 0)\ncommand:   " + fixtures.WorkerCommandLine + "\n",
			wantWorker:   workerContainer{Name: "mpi", Command: fixtures.WorkerCommand},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path, err := fixtures.Path("testdata", "flyte", "v1", tc.job+".yaml")
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if err := runPreview(append([]string{"-f", path}, tc.flags...), nil, &stdout, &stderr); err != nil {
				t.Fatalf("preview: %v\n%s", err, &stderr)
			}
			if !strings.HasPrefix(stderr.String(), tc.wantDecision) {
				t.Errorf("decision on stderr:\n%s\nwant it to start with:\n%s", &stderr, tc.wantDecision)
			}
			want := tc.wantWorker
			if want.Name == "" { // unchanged: as in the file
				sent, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				want = workerOf(t, sent)
			}
			if diff := cmp.Diff(want, workerOf(t, stdout.Bytes())); diff != "" {
				t.Errorf("worker (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPreviewReadsJSONFromStdinWithDecisionFlags(t *testing.T) {
	b, err := os.ReadFile(sampleWith(t, "v1", map[string]string{
		mutate.AnnotationWorkerSpecCommand: "/usr/sbin/sshd  -De -f '/home/jobuser/.sshd_config'",
	}))
	if err != nil {
		t.Fatal(err)
	}
	object, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := runPreview([]string{"-f", "-", "--inject-as=split"}, bytes.NewReader(object), &stdout, &stderr); err != nil {
		t.Fatalf("preview: %v\n%s", err, &stderr)
	}
	want := workerContainer{Name: "mpi", Command: fixtures.SSHD[:1], Args: fixtures.SSHD[1:]}
	if diff := cmp.Diff(want, workerOf(t, stdout.Bytes())); diff != "" {
		t.Errorf("worker (-want +got):\n%s", diff)
	}
	if !strings.Contains(stderr.String(), "source:    worker-spec-command\n") {
		t.Errorf("stderr does not name the source:\n%s", &stderr)
	}
}

func TestPreviewDeniesAsTheServerWould(t *testing.T) {
	var stdout, stderr bytes.Buffer
	path := sampleWith(t, "v2beta1", map[string]string{mutate.AnnotationTaskCustom: `{"workerReplicas":{"command":"sshd"}}`})
	err := runPreview([]string{"-f", path}, nil, &stdout, &stderr)
	if !errors.Is(err, errDenied) {
		t.Fatalf("error %v, want errDenied", err)
	}
	if stdout.Len() != 0 {
		t.Errorf("a denied job was printed:\n%s", &stdout)
	}
	want := "denied:    422 Invalid: mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings\n" +
		"field:     metadata.annotations[mpi.flyte.org/task-custom]\n"
	if !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("stderr %q does not end with %q", &stderr, want)
	}

	// With --on-invalid=warn it is printed unchanged, with the warning.
	stdout.Reset()
	stderr.Reset()
	if err := runPreview([]string{"-f", path, "--on-invalid", "warn"}, nil, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if got := workerOf(t, stdout.Bytes()); got.Command != nil || got.Args[0] != "horovodrun" {
		t.Errorf("worker changed: %+v", got)
	}
	if !strings.Contains(stderr.String(), "warning:   mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings") {
		t.Errorf("no warning on stderr:\n%s", &stderr)
	}
}

func TestPreviewRefusesOtherObjects(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := runPreview([]string{"-f", "-"}, strings.NewReader("apiVersion: v1\nkind: Pod\n"), &stdout, &stderr)
	want := `-: is apiVersion "v1" kind "Pod"; expected an MPIJob of kubeflow.org/v1 or kubeflow.org/v2beta1`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestAnnotateThenPreview makes the annotations from a binary TaskTemplate,
// as pyflyte serialize writes it, and checks that the webhook reads them.
func TestAnnotateThenPreview(t *testing.T) {
	custom := &kubeflowmpi.DistributedMPITrainingTask{
		WorkerReplicas:   &kubeflowmpi.DistributedMPITrainingReplicaSpec{Replicas: 2, Command: fixtures.WorkerCommand},
		LauncherReplicas: &kubeflowmpi.DistributedMPITrainingReplicaSpec{Replicas: 1},
		Slots:            1,
	}
	customJSON, err := protojson.Marshal(protoadapt.MessageV2Of(custom))
	if err != nil {
		t.Fatal(err)
	}
	var customStruct structpb.Struct
	if err := protojson.Unmarshal(customJSON, &customStruct); err != nil {
		t.Fatal(err)
	}
	template, err := proto.Marshal(protoadapt.MessageV2Of(&core.TaskTemplate{
		Id:              &core.Identifier{ResourceType: core.ResourceType_TASK, Project: "flytesnacks", Name: "horovod_training_task"},
		Type:            "mpi",
		TaskTypeVersion: 1,
		Custom:          &customStruct,
	}))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "task.pb")
	if err := os.WriteFile(path, template, 0o600); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	if err := runAnnotate([]string{"-f", path}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("annotate: %v\n%s", err, &stderr)
	}
	var annotations map[string]string
	if err := yaml.Unmarshal(stdout.Bytes(), &annotations); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, &stdout)
	}
	if got := annotations[mutate.AnnotationTaskTypeVersion]; got != "1" {
		t.Errorf("task type version %q, want 1", got)
	}
	var decoded map[string]any
	if err := json.Unmarshal([]byte(annotations[mutate.AnnotationTaskCustom]), &decoded); err != nil {
		t.Fatalf("the custom annotation is not JSON: %v", err)
	}

	stdout.Reset()
	if err := runPreview([]string{"-f", sampleWith(t, "v1", annotations)}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("preview: %v\n%s", err, &stderr)
	}
	if diff := cmp.Diff(workerContainer{Name: "mpi", Command: fixtures.WorkerCommand}, workerOf(t, stdout.Bytes())); diff != "" {
		t.Errorf("worker (-want +got):\n%s", diff)
	}
}

func TestAnnotateRefusesATaskThatIsNotMPI(t *testing.T) {
	template, err := proto.Marshal(protoadapt.MessageV2Of(&core.TaskTemplate{Id: &core.Identifier{Name: "t"}, Type: "python-task"}))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = runAnnotate([]string{"-f", "-"}, bytes.NewReader(template), &stdout, &stderr)
	want := `-: the task's type is "python-task"; only tasks of type [mpi horovod] run as MPIJobs`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestFallbackWorkerCommandFlagIsSplitAsAShellWould(t *testing.T) {
	path, err := fixtures.Path("testdata", "flyte", "v1", fixtures.HorovodNoWorkerCommand+".yaml")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := runPreview([]string{"-f", path, "--fallback-worker-command", `/usr/sbin/sshd -De -f '/home/job user/.sshd_config'`},
		nil, &stdout, &stderr); err != nil {
		t.Fatalf("preview: %v\n%s", err, &stderr)
	}
	want := workerContainer{Name: "mpi", Command: []string{"/usr/sbin/sshd", "-De", "-f", "/home/job user/.sshd_config"}}
	if diff := cmp.Diff(want, workerOf(t, stdout.Bytes())); diff != "" {
		t.Errorf("worker (-want +got):\n%s", diff)
	}

	err = runPreview([]string{"-f", path, "--fallback-worker-command", "/usr/sbin/sshd -De; sleep 1"}, nil, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-fallback-worker-command") || !strings.Contains(err.Error(), `shell operator ";"`) {
		t.Errorf("error %v, want one that names the flag and the shell operator", err)
	}
}

// TestReadInputBoundsFileAsStdin reads an input beyond MaxBodyBytes as a
// file and from standard input: each is read as far as the bound, no
// further, so that -f FILE holds no more memory than -f - does.
func TestReadInputBoundsFileAsStdin(t *testing.T) {
	bound := defaultLimits().review.MaxBodyBytes
	input := bytes.Repeat([]byte("x"), int(bound)+1)
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, input, 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := readInput(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	fromStdin, err := readInput("-", bytes.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(fromFile)) != bound || !bytes.Equal(fromFile, fromStdin) {
		t.Errorf("read %d bytes of the file, %d of standard input; want %d of each", len(fromFile), len(fromStdin), bound)
	}
}
