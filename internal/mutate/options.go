package mutate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
)

// Annotation keys: the contract between Flyte tasks and this webhook.
const (
	// AnnotationTaskCustom holds the task's custom, serialized (JSON or base64 protobuf).
	AnnotationTaskCustom = "mpi.flyte.org/task-custom"
	// AnnotationTaskTypeVersion says which message AnnotationTaskCustom holds: "0" or "1".
	AnnotationTaskTypeVersion = "mpi.flyte.org/task-type-version"
	// AnnotationWorkerSpecCommand holds the legacy task-config value worker_spec_command.
	AnnotationWorkerSpecCommand = "mpi.flyte.org/worker-spec-command"
	// AnnotationWorkerCommandSource is set on a mutated MPIJob to the Source of its worker command.
	AnnotationWorkerCommandSource = "mpi.flyte.org/worker-command-source"
)

// MaxAnnotationBytes is the largest annotation value Decide accepts.
const MaxAnnotationBytes = 64 << 10

// Source says where a worker command came from.
type Source string

// The sources of a worker command, in order of precedence.
const (
	SourceNone              Source = ""
	SourceTaskCustom        Source = "task-custom"
	SourceWorkerSpecCommand Source = "worker-spec-command"
	// SourceFlyteWorkerArgs is the worker command the task declared, which
	// Flyte writes into the worker container's args (see DeclaredWorkerCommand).
	SourceFlyteWorkerArgs Source = "flyte-worker-args"
	SourceFallback        Source = "fallback"
)

// InjectMode says how the worker command is written into the container.
type InjectMode string

const (
	// InjectCommand sets command to the whole worker command and removes args.
	InjectCommand InjectMode = "command"
	// InjectArgs sets args to the whole worker command and removes command (Flyte's PR #341).
	InjectArgs InjectMode = "args"
	// InjectSplit sets command to the first word and args to the rest.
	InjectSplit InjectMode = "split"
)

// InjectModes lists the valid InjectMode values, for flag help and errors.
var InjectModes = []InjectMode{InjectCommand, InjectArgs, InjectSplit}

// ParseInjectMode checks that s names an InjectMode.
func ParseInjectMode(s string) (InjectMode, error) {
	for _, m := range InjectModes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("%q is not one of %v", s, InjectModes)
}

// InvalidPolicy says what happens to a Flyte MPIJob whose annotations are invalid.
type InvalidPolicy string

const (
	// InvalidDeny rejects the MPIJob with a message naming the annotation.
	InvalidDeny InvalidPolicy = "deny"
	// InvalidWarn admits the MPIJob unchanged with an admission warning.
	InvalidWarn InvalidPolicy = "warn"
)

// ParseInvalidPolicy checks that s names an InvalidPolicy.
func ParseInvalidPolicy(s string) (InvalidPolicy, error) {
	switch p := InvalidPolicy(s); p {
	case InvalidDeny, InvalidWarn:
		return p, nil
	}
	return "", fmt.Errorf("%q is not one of [%s %s]", s, InvalidDeny, InvalidWarn)
}

// DefaultFlyteTaskSelector selects the objects Flyte creates for a task:
// Flyte puts both labels on every one of them.
const DefaultFlyteTaskSelector = "execution-id,task-name"

// DefaultContainerName is the MPI container's name in the MPIJobs Flyte creates.
const DefaultContainerName = "mpi"

// Options are the decision's settings, one per server flag.
type Options struct {
	// FlyteTaskSelector selects the MPIJobs that are Flyte tasks, by their labels.
	FlyteTaskSelector labels.Selector
	// ContainerName is the name the MPI container is expected to have. The
	// patch goes to the first container, the one both MPI operators run MPI
	// in; a container of this name further down is warned about.
	ContainerName string
	// InjectAs says how the command is written into the container.
	InjectAs InjectMode
	// InferWorkerCommand takes a worker command the task declared, which Flyte
	// writes into the worker's args, when no annotation gives one.
	InferWorkerCommand bool
	// FallbackCommand is used for a worker without a command when neither an
	// annotation nor the task gives one; empty means do nothing.
	FallbackCommand []string
	// OnInvalid says what happens when an annotation is invalid.
	OnInvalid InvalidPolicy
}

// DefaultOptions returns the options the server runs with when no flag is given.
func DefaultOptions() Options {
	selector, err := labels.Parse(DefaultFlyteTaskSelector)
	if err != nil {
		panic(err) // a constant that does not parse is a programming error
	}
	return Options{
		FlyteTaskSelector:  selector,
		ContainerName:      DefaultContainerName,
		InjectAs:           InjectCommand,
		InferWorkerCommand: true,
		OnInvalid:          InvalidDeny,
	}
}
