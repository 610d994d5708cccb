package mutate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
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

// InvalidAction is what is done with a Flyte MPIJob whose annotations are invalid.
type InvalidAction string

const (
	// InvalidDeny rejects the MPIJob with a message naming the annotation.
	InvalidDeny InvalidAction = "deny"
	// InvalidWarn admits the MPIJob unchanged with an admission warning.
	InvalidWarn InvalidAction = "warn"
)

// ParseInvalidAction checks that s names an InvalidAction.
func ParseInvalidAction(s string) (InvalidAction, error) {
	switch p := InvalidAction(s); p {
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

// Options are the decision's settings. cmd/webhook binds a flag to each
// (bindDecisionFlags), its help repeating what is said here, for the server
// and for preview; DefaultOptions gives the defaults.
type Options struct {
	// FlyteTaskSelector selects the MPIJobs that are Flyte tasks, by their
	// labels (--flyte-task-selector). Defaults to DefaultFlyteTaskSelector,
	// execution-id,task-name.
	FlyteTaskSelector labels.Selector
	// ContainerName is the name the MPI container is expected to have. It
	// only raises a warning, for a container of this name further down: the
	// patch goes to the first container, the one both MPI operators run MPI
	// in (--container-name). Defaults to DefaultContainerName, mpi.
	ContainerName string
	// InjectAs says how the command is written into the container
	// (--inject-as). Defaults to InjectCommand.
	InjectAs InjectMode
	// InferWorkerCommand takes a worker command the task declared, which Flyte
	// writes into the worker's args, when no annotation gives one
	// (--infer-worker-command). Defaults to true.
	InferWorkerCommand bool
	// FallbackCommand is used for a worker without a command when neither an
	// annotation nor the task gives one; empty means do nothing
	// (--fallback-worker-command). Defaults to empty.
	FallbackCommand []string
	// OnInvalid says what happens when an annotation is invalid
	// (--on-invalid). Defaults to InvalidDeny.
	OnInvalid InvalidAction
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
