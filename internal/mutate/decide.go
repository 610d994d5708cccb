package mutate

import (
	"fmt"
	"strconv"

	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/labels"
)

// Outcome is what Decide did with an MPIJob; it names the decision in logs and metrics.
type Outcome string

// The outcomes of Decide.
const (
	// OutcomeMutated: the patch sets the worker command.
	OutcomeMutated Outcome = "mutated"
	// OutcomeUnchanged: a Flyte task, but there is nothing to do (no command, or already set).
	OutcomeUnchanged Outcome = "unchanged"
	// OutcomeSkippedNotFlyte: not a Flyte task creation; left alone.
	OutcomeSkippedNotFlyte Outcome = "skipped_not_flyte"
	// OutcomeDeniedInvalid: an annotation is invalid and the MPIJob is to be rejected.
	OutcomeDeniedInvalid Outcome = "denied_invalid"
	// OutcomeWarnedInvalid: an annotation is invalid and the MPIJob is admitted unchanged, with a warning.
	OutcomeWarnedInvalid Outcome = "warned_invalid"
)

// Decision is the result of Decide.
type Decision struct {
	Outcome Outcome
	// Source is where the worker command came from; SourceNone when none was found.
	Source Source
	// Container is the index of the patched worker container, -1 when none.
	Container int
	// ContainerName is the name of that container.
	ContainerName string
	// Command and Args are what the container runs after the patch.
	Command, Args []string
	// Warnings are for the user, as admission warnings.
	Warnings []string
	// Err is why an annotation is invalid, for OutcomeDeniedInvalid and OutcomeWarnedInvalid.
	Err error
	// Patch is the JSON patch to apply to the MPIJob; empty unless OutcomeMutated.
	Patch []jsonpatch.Operation
}

// AnnotationError says which annotation is invalid, and why.
type AnnotationError struct {
	Key string
	Err error
}

func (e *AnnotationError) Error() string { return e.Key + ": " + e.Err.Error() }

func (e *AnnotationError) Unwrap() error { return e.Err }

// Decide decides what to do with the creation of an MPIJob. It does not
// change job. opts must have a FlyteTaskSelector; DefaultOptions has one.
func Decide(job *Job, opts Options) Decision {
	d := Decision{Container: -1}
	if !opts.FlyteTaskSelector.Matches(labels.Set(job.Metadata.Labels)) {
		d.Outcome = OutcomeSkippedNotFlyte // not a Flyte task: leave it
		return d
	}
	command, source, err := WorkerCommand(job, opts)
	if err != nil {
		d.Err = err
		if opts.OnInvalid == InvalidWarn {
			d.Outcome = OutcomeWarnedInvalid
			d.Warnings = append(d.Warnings, err.Error()+"; the MPIJob was admitted unchanged")
		} else {
			d.Outcome = OutcomeDeniedInvalid
		}
		return d
	}
	d.Source = source
	d.Outcome = OutcomeUnchanged
	if len(command) == 0 {
		return d // no annotation and no fallback: nothing to inject
	}

	worker := job.Spec.MPIReplicaSpecs.Worker
	switch {
	case worker == nil:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: missing, so the worker command from %s was not injected",
			workerContainersField.Root().Child("mpiReplicaSpecs", "Worker"), source))
		return d
	case len(worker.Template.Spec.Containers) == 0:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: no containers, so the worker command from %s was not injected",
			workerContainersField, source))
		return d
	}
	containers := worker.Template.Spec.Containers
	d.Container = workerContainer(containers, opts.ContainerName)
	c := containers[d.Container]
	d.ContainerName = c.Name
	if n := countNamed(containers, c.Name); n > 1 {
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %d containers are named %q; the first of them was patched",
			workerContainersField, n, c.Name))
	}
	d.Command, d.Args = placeCommand(command, opts.InjectAs)
	if c.Command.Equal(d.Command) && c.Args.Equal(d.Args) {
		return d // already runs the worker command: a reinvocation, or set by hand
	}
	d.Outcome = OutcomeMutated
	d.Patch = patch(job, d)
	return d
}

// WorkerCommand returns the worker command of a Flyte MPIJob and its source,
// by the precedence in the package doc. It returns an *AnnotationError when an
// annotation is invalid, even one that a higher-precedence source makes unused.
func WorkerCommand(job *Job, opts Options) ([]string, Source, error) {
	typeVersion, _ := annotation(job, AnnotationTaskTypeVersion)
	switch typeVersion {
	case "", TaskTypeVersionLegacy, TaskTypeVersionKubeflow:
	default:
		return nil, SourceNone, &AnnotationError{AnnotationTaskTypeVersion,
			fmt.Errorf("%s is not a task type version of Flyte's MPI task; expected %q or %q",
				strconv.Quote(typeVersion), TaskTypeVersionLegacy, TaskTypeVersionKubeflow)}
	}

	var fromCustom, fromSpec []string
	if custom, ok := annotation(job, AnnotationTaskCustom); ok {
		if err := checkSize(custom); err != nil {
			return nil, SourceNone, &AnnotationError{AnnotationTaskCustom, err}
		}
		command, err := decodeTaskCustom(custom, typeVersion)
		if err == nil {
			err = checkCommand(command)
		}
		if err != nil {
			return nil, SourceNone, &AnnotationError{AnnotationTaskCustom, err}
		}
		fromCustom = command
	}
	if line, ok := annotation(job, AnnotationWorkerSpecCommand); ok {
		if err := checkSize(line); err != nil {
			return nil, SourceNone, &AnnotationError{AnnotationWorkerSpecCommand, err}
		}
		command, err := SplitCommand(line)
		if err != nil {
			return nil, SourceNone, &AnnotationError{AnnotationWorkerSpecCommand, err}
		}
		fromSpec = command
	}

	switch {
	case len(fromCustom) > 0:
		return fromCustom, SourceTaskCustom, nil
	case len(fromSpec) > 0:
		return fromSpec, SourceWorkerSpecCommand, nil
	case len(opts.FallbackCommand) > 0:
		return opts.FallbackCommand, SourceFallback, nil
	}
	return nil, SourceNone, nil
}

// annotation looks key up on the MPIJob and, where it is absent there, on the
// Worker's pod template, where Flyte copies a task's pod-template annotations.
func annotation(job *Job, key string) (string, bool) {
	if v, ok := job.Metadata.Annotations[key]; ok {
		return v, true
	}
	if w := job.Spec.MPIReplicaSpecs.Worker; w != nil {
		v, ok := w.Template.Metadata.Annotations[key]
		return v, ok
	}
	return "", false
}

func checkSize(value string) error {
	if len(value) > MaxAnnotationBytes {
		return fmt.Errorf("is %d bytes, more than the %d allowed", len(value), MaxAnnotationBytes)
	}
	return nil
}

// workerContainer picks the container named name or, when none is, the
// first: both MPI operators treat the first container as the MPI container.
func workerContainer(containers []Container, name string) int {
	for i, c := range containers {
		if c.Name == name {
			return i
		}
	}
	return 0
}

func countNamed(containers []Container, name string) int {
	n := 0
	for _, c := range containers {
		if c.Name == name {
			n++
		}
	}
	return n
}

// placeCommand splits the worker command between a container's command and args.
func placeCommand(command []string, mode InjectMode) (cmd, args []string) {
	switch mode {
	case InjectArgs:
		return nil, command
	case InjectSplit:
		if len(command) > 1 {
			return command[:1], command[1:]
		}
		return command, nil
	default:
		return command, nil
	}
}

// patch returns the JSON patch that gives container d.Container the command
// and args of d, and records the source. It touches nothing else.
func patch(job *Job, d Decision) []jsonpatch.Operation {
	c := job.Spec.MPIReplicaSpecs.Worker.Template.Spec.Containers[d.Container]
	container := workerContainersPointer + "/" + strconv.Itoa(d.Container) + "/"
	ops := make([]jsonpatch.Operation, 0, 3)
	for _, f := range []struct {
		name        string
		old         Words
		replacement []string
	}{{"command", c.Command, d.Command}, {"args", c.Args, d.Args}} {
		switch {
		case f.old.Equal(f.replacement):
			// already right: the patch touches only what changes
		case len(f.replacement) > 0:
			ops = append(ops, jsonpatch.NewOperation("add", container+f.name, f.replacement))
		case f.old.Present:
			ops = append(ops, jsonpatch.NewOperation("remove", container+f.name, nil))
		}
	}
	if job.Metadata.Annotations == nil {
		ops = append(ops, jsonpatch.NewOperation("add", annotationsPointer,
			map[string]string{AnnotationWorkerCommandSource: string(d.Source)}))
	} else {
		ops = append(ops, jsonpatch.NewOperation("add", sourceAnnotationPointer, string(d.Source)))
	}
	return ops
}

// JSON pointers of the fields patch sets, built once.
var (
	workerContainersPointer = jsonPointer(workerContainers...)
	annotationsPointer      = jsonPointer("metadata", "annotations")
	sourceAnnotationPointer = jsonPointer("metadata", "annotations", AnnotationWorkerCommandSource)
)
