// Package annotate turns a Flyte MPI task into the annotations the webhook
// reads, for `webhook annotate`: a user pastes them into a pod template's or a
// launch plan's annotations.
package annotate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/admin"
	"github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/core"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// MPITaskTypes are the task types Flyte's MPI plugin runs: flytekit's MPI
// task and its Horovod task.
var MPITaskTypes = []string{"mpi", "horovod"}

// workerSpecCommandConfig is the task-config key the legacy Horovod task used.
const workerSpecCommandConfig = "worker_spec_command"

// FromFile returns the annotations for a task given as one of:
//   - the task custom as JSON (what `mpi.flyte.org/task-custom` holds);
//   - a binary flyteidl.core.TaskTemplate;
//   - a binary flyteidl.admin.TaskSpec, which `pyflyte serialize` writes.
//
// The result passes the webhook's own checks: it is what the webhook accepts.
// The warning, when not empty, says that the task declares no worker command,
// and how to declare one.
func FromFile(data []byte) (annotations map[string]string, warning string, err error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var compact bytes.Buffer
		if err := json.Compact(&compact, trimmed); err != nil {
			return nil, "", fmt.Errorf("the task custom is not valid JSON: %w", err)
		}
		annotations = map[string]string{mutate.AnnotationTaskCustom: compact.String()}
	} else {
		template, err := taskTemplate(data)
		if err != nil {
			return nil, "", err
		}
		if annotations, err = fromTemplate(template); err != nil {
			return nil, "", err
		}
	}
	command, _, err := mutate.AnnotatedCommand(&mutate.Job{Metadata: mutate.Metadata{Annotations: annotations}})
	if err != nil {
		return nil, "", err
	}
	if len(command) == 0 {
		warning = NoWorkerCommandWarning
	}
	return annotations, warning, nil
}

// NoWorkerCommandWarning is the warning for a task that declares no worker command.
const NoWorkerCommandWarning = "the task declares no worker command, so these annotations give the webhook none and " +
	"the job is left as Flyte made it: the training-operator's workers run `sleep 365d`, and its launcher starts the " +
	"ranks in them with kubectl exec, which is all such a task needs. Declare one, Worker(command=[...]) with " +
	"flytekitplugins-kfmpi, only when the workers must run something of their own, and the webhook needs no " +
	"annotation: it reads the command Flyte writes into the worker's args"

// taskTemplate decodes a binary TaskTemplate, or the TaskTemplate inside a
// binary TaskSpec. Protobuf's wire format cannot tell the two apart, so it
// takes whichever decodes to an MPI task.
func taskTemplate(data []byte) (*core.TaskTemplate, error) {
	var template core.TaskTemplate
	errTemplate := proto.Unmarshal(data, protoadapt.MessageV2Of(&template))
	if errTemplate == nil && slices.Contains(MPITaskTypes, template.GetType()) {
		return &template, nil
	}
	var spec admin.TaskSpec
	if err := proto.Unmarshal(data, protoadapt.MessageV2Of(&spec)); err == nil && slices.Contains(MPITaskTypes, spec.GetTemplate().GetType()) {
		return spec.GetTemplate(), nil
	}
	switch {
	case errTemplate != nil:
		return nil, fmt.Errorf("neither JSON nor a binary flyteidl.core.TaskTemplate or flyteidl.admin.TaskSpec: %w", errTemplate)
	case template.GetType() != "":
		return nil, fmt.Errorf("the task's type is %q; only tasks of type %v run as MPIJobs", template.GetType(), MPITaskTypes)
	}
	return nil, errors.New("not a Flyte MPI task: no task type of " + fmt.Sprint(MPITaskTypes) + " found")
}

// fromTemplate returns the annotations that carry an MPI task's custom,
// task type version and legacy worker_spec_command.
func fromTemplate(template *core.TaskTemplate) (map[string]string, error) {
	annotations := map[string]string{
		mutate.AnnotationTaskTypeVersion: strconv.Itoa(int(template.GetTaskTypeVersion())),
	}
	if custom := template.GetCustom(); custom != nil {
		b, err := protojson.Marshal(protoadapt.MessageV2Of(custom))
		if err != nil {
			return nil, fmt.Errorf("encoding the task custom: %w", err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, b); err != nil { // protojson varies its spacing on purpose
			return nil, err
		}
		annotations[mutate.AnnotationTaskCustom] = compact.String()
	}
	if command, ok := template.GetConfig()[workerSpecCommandConfig]; ok {
		annotations[mutate.AnnotationWorkerSpecCommand] = command
	}
	return annotations, nil
}
