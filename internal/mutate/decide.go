package mutate

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
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
	// OutcomeMalformed: not Decide's but its caller's, for a request whose object it cannot give Decide
	// (none, or of another kind than the request's); refused as a bad request.
	OutcomeMalformed Outcome = "malformed"
)

// Decision is the result of Decide.
type Decision struct {
	Outcome Outcome
	// Source is where the worker command came from; SourceNone when none was found.
	Source Source
	// Container is the index of the patched worker container, -1 when none.
	// It is 0 whenever there is one: both MPI operators run MPI in the first.
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
	// Path is where the annotation is: the MPIJob's metadata, or the Worker pod template's.
	Path *field.Path
}

func (e *AnnotationError) Error() string {
	return truncate.String(e.Key+": "+e.Err.Error(), maxMessageBytes)
}

// Detail is why the annotation is invalid, without its key, bounded as
// Error is: the message of the cause that names the annotation's Field.
func (e *AnnotationError) Detail() string { return truncate.String(e.Err.Error(), maxMessageBytes) }

// Field is the path of the annotation in the MPIJob, as the API server names the fields of an invalid object.
func (e *AnnotationError) Field() string { return e.Path.String() }

// invalidAnnotation is the error of annotation key of job, which err says is invalid.
func invalidAnnotation(job *Job, key string, err error) *AnnotationError {
	at := annotationsField
	if _, ok := job.Metadata.Annotations[key]; !ok {
		at = workerAnnotationsField
	}
	return &AnnotationError{Key: key, Err: err, Path: at.Key(key)}
}

func (e *AnnotationError) Unwrap() error { return e.Err }

// Decide decides what to do with the creation of an MPIJob. It does not
// change job. opts must have a FlyteTaskSelector; DefaultOptions has one.
func Decide(job *Job, opts Options) Decision {
	d := Decision{Container: -1, Source: SourceNone}
	if !opts.FlyteTaskSelector.Matches(labels.Set(job.Metadata.Labels)) {
		d.Outcome = OutcomeSkippedNotFlyte // not a Flyte task: leave it
		return d
	}
	command, source, err := AnnotatedCommand(job)
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
	d.Outcome = OutcomeUnchanged
	worker := job.Spec.MPIReplicaSpecs.Worker.mpiContainer()
	if i := namedContainer(job.Spec.MPIReplicaSpecs.Worker, opts.ContainerName); i > 0 {
		// Whatever the webhook does, the operators use the first container:
		// the job cannot work until its MPI container comes first. The
		// policy's warning (config/policy) says the same, word for word.
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: is named %s, but the MPI operators use the first container, %s: "+
			"the training-operator launcher starts the ranks there with kubectl exec, and mpi-operator mounts the SSH keys "+
			"there and runs sshd there by default; the worker command goes there too; put the MPI container first",
			workerContainersField.Index(i), quote(opts.ContainerName), quote(worker.Name)))
	}
	if len(command) == 0 && opts.InferWorkerCommand {
		var warning string
		command, warning = DeclaredWorkerCommand(job)
		if warning != "" {
			d.Warnings = append(d.Warnings, warning)
		}
		source = SourceFlyteWorkerArgs
	}
	if len(command) == 0 && (worker == nil || len(words(worker.Command)) == 0) {
		// A container command is the task's or a previous pass's: a
		// cluster-wide fallback never overrides it, so reinvocation is safe.
		command, source = opts.FallbackCommand, SourceFallback
	}
	if len(command) == 0 {
		return d // no command to inject: leave the job as Flyte made it
	}
	d.Source = source

	switch {
	case job.Spec.MPIReplicaSpecs.Worker == nil:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: missing, so the worker command from %s was not injected",
			workerField, source))
		return d
	case worker == nil:
		d.Warnings = append(d.Warnings, fmt.Sprintf("%s: no containers, so the worker command from %s was not injected",
			workerContainersField, source))
		return d
	}
	d.Container, d.ContainerName = 0, worker.Name
	d.Command, d.Args = placeCommand(command, opts.InjectAs)
	if slices.Equal(words(worker.Command), d.Command) && slices.Equal(words(worker.Args), d.Args) {
		return d // already runs the worker command: a reinvocation, or set by hand
	}
	d.Outcome = OutcomeMutated
	d.Patch = patch(job, d)
	return d
}

// AnnotatedCommand returns the worker command that the annotations of a Flyte
// MPIJob give, and its source, by the precedence in the package doc. It
// returns an *AnnotationError when an annotation is invalid, even one that a
// higher-precedence annotation makes unused, so that nothing is half-applied.
func AnnotatedCommand(job *Job) ([]string, Source, error) {
	typeVersion, _ := annotation(job, AnnotationTaskTypeVersion)
	switch typeVersion {
	case "", TaskTypeVersionLegacy, TaskTypeVersionKubeflow:
	default:
		return nil, SourceNone, invalidAnnotation(job, AnnotationTaskTypeVersion, fmt.Errorf(
			"%s is not a task type version of Flyte's MPI task; expected %q or %q",
			quote(typeVersion), TaskTypeVersionLegacy, TaskTypeVersionKubeflow))
	}

	var fromCustom, fromSpec []string
	if custom, ok := annotation(job, AnnotationTaskCustom); ok {
		if err := checkSize(custom); err != nil {
			return nil, SourceNone, invalidAnnotation(job, AnnotationTaskCustom, err)
		}
		command, err := decodeTaskCustom(custom, typeVersion)
		if err == nil {
			err = checkCommand(command)
		}
		if err != nil {
			return nil, SourceNone, invalidAnnotation(job, AnnotationTaskCustom, err)
		}
		fromCustom = command
	}
	if line, ok := annotation(job, AnnotationWorkerSpecCommand); ok {
		if err := checkSize(line); err != nil {
			return nil, SourceNone, invalidAnnotation(job, AnnotationWorkerSpecCommand, err)
		}
		command, err := SplitCommand(line)
		if err != nil {
			return nil, SourceNone, invalidAnnotation(job, AnnotationWorkerSpecCommand, err)
		}
		fromSpec = command
	}

	switch {
	case len(fromCustom) > 0:
		return fromCustom, SourceTaskCustom, nil
	case len(fromSpec) > 0:
		return fromSpec, SourceWorkerSpecCommand, nil
	}
	return nil, SourceNone, nil
}

// DeclaredWorkerCommand returns the worker command that a Flyte task
// declared, or nil when it declared none. Flyte writes a declared worker
// command (flytekit's Worker(command=...), or a v0 task's worker_spec_command)
// into the worker container's args and leaves its command empty; a task that
// declares none gets a worker that copies the launcher's args. The worker's
// args are a declared command when they differ from the launcher's and are
// not a Flyte task's own entrypoint: a task that declares only
// Launcher(command=...) gets a worker whose args differ from the launcher's
// but still run the task. The warning, when not empty, says why args that
// look declared were not taken.
func DeclaredWorkerCommand(job *Job) (command []string, warning string) {
	worker := job.Spec.MPIReplicaSpecs.Worker.mpiContainer()
	if worker == nil || len(words(worker.Command)) > 0 {
		return nil, "" // nothing to read, or the container says what it runs
	}
	args := words(worker.Args)
	if len(args) == 0 || runsFlyteTask(args) {
		return nil, "" // no args, or the task's own entrypoint
	}
	launcherSpec := job.Spec.MPIReplicaSpecs.Launcher
	launcher := launcherSpec.mpiContainer()
	switch {
	case launcherSpec == nil:
		return nil, fmt.Sprintf("%s: missing, so the Worker's args were not taken for a worker command the task declared", launcherField)
	case launcher == nil:
		return nil, fmt.Sprintf("%s: no containers, so the Worker's args were not taken for a worker command the task declared",
			launcherField.Child("template", "spec", "containers"))
	case slices.Equal(args, words(launcher.Args)):
		return nil, "" // a copy of the launcher's args
	case args[0] == "":
		// Flyte's legacy split on single spaces of a line that starts with a blank: as a
		// command, no runtime could start it; as Flyte made it, the worker sleeps and its
		// ranks come by kubectl exec. config/policy's warning says the same, word for word.
		return nil, fmt.Sprintf("%s: is empty, so the Worker's args were not taken for a worker command the task declared: "+
			"no container runtime can start a program with an empty name", workerContainersField.Index(0).Child("args").Index(0))
	}
	return args, ""
}

// runsFlyteTask reports whether args run a Flyte task: Flyte's task
// entrypoints are pyflyte-execute, pyflyte-fast-execute, pyflyte-map-execute
// and the like, which a worker command (sshd) never runs.
func runsFlyteTask(args []string) bool {
	return slices.ContainsFunc(args, func(arg string) bool {
		name := path.Base(arg)
		return strings.HasPrefix(name, "pyflyte-") && strings.HasSuffix(name, "-execute")
	})
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

// namedContainer returns the index of the first of a replica's containers
// named name, or -1.
func namedContainer(r *ReplicaSpec, name string) int {
	if r == nil {
		return -1
	}
	return slices.IndexFunc(r.Template.Spec.Containers, func(c Container) bool { return c.Name == name })
}

// words returns the strings of a command or args field; nil when absent.
func words(list *[]string) []string {
	if list == nil {
		return nil
	}
	return *list
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

// patch returns the JSON patch that gives the worker's MPI container the
// command and args of d, and records the source. It touches nothing else.
func patch(job *Job, d Decision) []jsonpatch.Operation {
	c := job.Spec.MPIReplicaSpecs.Worker.mpiContainer()
	container := jsonPointer("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers", strconv.Itoa(d.Container))
	ops := make([]jsonpatch.Operation, 0, 3)
	for _, f := range []struct {
		name        string
		old         *[]string
		replacement []string
	}{{"command", c.Command, d.Command}, {"args", c.Args, d.Args}} {
		switch {
		case slices.Equal(words(f.old), f.replacement):
			// already right: the patch touches only what changes
		case len(f.replacement) > 0:
			ops = append(ops, jsonpatch.NewOperation("add", container+"/"+f.name, f.replacement))
		case f.old != nil:
			ops = append(ops, jsonpatch.NewOperation("remove", container+"/"+f.name, nil))
		}
	}
	if job.Metadata.Annotations == nil {
		ops = append(ops, jsonpatch.NewOperation("add", jsonPointer("metadata", "annotations"),
			map[string]string{AnnotationWorkerCommandSource: string(d.Source)}))
	} else {
		ops = append(ops, jsonpatch.NewOperation("add",
			jsonPointer("metadata", "annotations", AnnotationWorkerCommandSource), string(d.Source)))
	}
	return ops
}
