package annotate

import (
	"encoding/json"
	"testing"

	"github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/admin"
	"github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/core"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

func customStruct(t *testing.T, custom string) *structpb.Struct {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(custom), &m); err != nil {
		t.Fatal(err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func marshal(t *testing.T, m protoadapt.MessageV1) []byte {
	t.Helper()
	b, err := proto.Marshal(protoadapt.MessageV2Of(m))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFromFile(t *testing.T) {
	horovod := &core.TaskTemplate{
		Id:              &core.Identifier{ResourceType: core.ResourceType_TASK, Project: "flytesnacks", Domain: "development", Name: "horovod_training.horovod_training_task", Version: "v1"},
		Type:            "horovod",
		TaskTypeVersion: 1,
		Custom:          customStruct(t, fixtures.FlytekitCustom),
	}
	legacy := &core.TaskTemplate{
		Id:     &core.Identifier{ResourceType: core.ResourceType_TASK, Project: "flytesnacks", Name: "legacy"},
		Type:   "mpi",
		Custom: customStruct(t, fixtures.LegacyCustom),
		Config: map[string]string{"worker_spec_command": fixtures.SSHDLine},
	}
	python := &core.TaskTemplate{Id: &core.Identifier{Name: "t"}, Type: "python-task", Custom: customStruct(t, `{}`)}

	noWorkerCommand := &core.TaskTemplate{
		Id: &core.Identifier{Name: "horovod_training_task"}, Type: "mpi", TaskTypeVersion: 1,
		Custom: customStruct(t, fixtures.NoWorkerCommandCustom),
	}

	cases := map[string]struct {
		input       []byte
		want        map[string]string
		wantWarning string
		wantErr     string
	}{
		"a task that declares no worker command: a warning says how to declare one": {
			input: marshal(t, noWorkerCommand),
			want: map[string]string{
				mutate.AnnotationTaskCustom:      fixtures.NoWorkerCommandCustom,
				mutate.AnnotationTaskTypeVersion: "1",
			},
			wantWarning: NoWorkerCommandWarning,
		},
		"the task custom as JSON, compacted": {
			input: []byte("{\n  \"workerReplicas\": {\"command\": [\"/usr/sbin/sshd\", \"-De\"]}\n}\n"),
			want:  map[string]string{mutate.AnnotationTaskCustom: `{"workerReplicas":{"command":["/usr/sbin/sshd","-De"]}}`},
		},
		"a binary TaskTemplate of flytekit's Horovod task": {
			input: marshal(t, horovod),
			want: map[string]string{
				mutate.AnnotationTaskCustom:      fixtures.FlytekitCustom,
				mutate.AnnotationTaskTypeVersion: "1",
			},
		},
		"a binary TaskSpec, as pyflyte serialize writes it": {
			input: marshal(t, &admin.TaskSpec{Template: horovod, Description: &admin.DescriptionEntity{ShortDescription: "trains"}}),
			want: map[string]string{
				mutate.AnnotationTaskCustom:      fixtures.FlytekitCustom,
				mutate.AnnotationTaskTypeVersion: "1",
			},
		},
		"a legacy MPI TaskTemplate with worker_spec_command": {
			input: marshal(t, legacy),
			want: map[string]string{
				mutate.AnnotationTaskCustom:        fixtures.LegacyCustom,
				mutate.AnnotationTaskTypeVersion:   "0",
				mutate.AnnotationWorkerSpecCommand: fixtures.SSHDLine,
			},
		},
		"a task that is not MPI": {
			input:   marshal(t, python),
			wantErr: `the task's type is "python-task"; only tasks of type [mpi horovod] run as MPIJobs`,
		},
		"invalid JSON": {
			input:   []byte(`{"workerReplicas":`),
			wantErr: "the task custom is not valid JSON: unexpected end of JSON input",
		},
		"a custom the webhook would deny": {
			input:   []byte(`{"workerReplicas":{"command":"sshd"}}`),
			wantErr: "mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings",
		},
		"not protobuf": {
			input:   []byte{0xff, 0xff, 0xff},
			wantErr: "neither JSON nor a binary flyteidl.core.TaskTemplate or flyteidl.admin.TaskSpec: proto: cannot parse invalid wire-format data",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, warning, err := FromFile(tc.input)
			var gotErr string
			if err != nil {
				gotErr = normalizeSpaces(err.Error())
			}
			if gotErr != tc.wantErr {
				t.Fatalf("error %q, want %q", gotErr, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("FromFile() (-want +got):\n%s", diff)
			}
			if warning != tc.wantWarning {
				t.Errorf("warning %q, want %q", warning, tc.wantWarning)
			}
		})
	}
}

// normalizeSpaces undoes protobuf's deliberate use of non-breaking spaces in its errors.
func normalizeSpaces(s string) string {
	out := []rune(s)
	for i, r := range out {
		if r == '\u00a0' {
			out[i] = ' '
		}
	}
	return string(out)
}
