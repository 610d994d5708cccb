package mutate

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

// Source says where a worker command came from: the value of
// AnnotationWorkerCommandSource on a mutated MPIJob.
type Source string

// The sources of a worker command, in order of precedence.
const (
	// SourceNone: no worker command was found, and the job keeps what it
	// has, without the source annotation; the metrics and logs say "none".
	SourceNone              Source = "none"
	SourceTaskCustom        Source = "task-custom"
	SourceWorkerSpecCommand Source = "worker-spec-command"
	// SourceFlyteWorkerArgs is the worker command the task declared, which
	// Flyte writes into the worker container's args (see DeclaredWorkerCommand).
	SourceFlyteWorkerArgs Source = "flyte-worker-args"
	SourceFallback        Source = "fallback"
)
