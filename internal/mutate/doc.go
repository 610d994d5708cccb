// Package mutate decides which command the worker of a Flyte MPIJob runs.
//
// It is the whole of the webhook's logic and has no client, no HTTP, no
// AdmissionReview and no global state. A JobDecoder decodes the parts of an
// MPIJob that Decide reads (a Job: kubeflow.org/v1 and v2beta1 share the
// paths involved), skipping everything else unallocated; Decide takes the
// Job and the Options and returns a Decision, which carries the JSON patch
// to apply. The admission handler (internal/admission) decodes the
// AdmissionReview and, in the same pass, its job (JobDecoder.Target), leaves
// alone every request that is no MPIJob creation, and calls Decide: the
// walk of a review is in its package doc. The preview command goes through
// that handler, so what a user previews is what the server does.
//
// Flyte copies one pod spec into the Launcher and the Worker, and writes a
// worker command that the task declares into the worker container's args,
// never its command: the training-operator then runs `sleep 365d` in place of
// a worker without command, so the declared command never runs, and
// mpi-operator keeps the args. A task that declares none needs none: the
// training-operator's launcher starts the ranks in the sleeping workers with
// kubectl exec, and Decide leaves its job as Flyte made it. The worker
// command comes from, in order of precedence:
//  1. workerReplicas.command in the task custom serialized into the
//     annotation mpi.flyte.org/task-custom (flytekit's task_type_version 1);
//  2. the legacy task-config value worker_spec_command, in the annotation
//     mpi.flyte.org/worker-spec-command, split into words as a shell would;
//  3. the worker's args, when they are a command the task declared
//     (DeclaredWorkerCommand) and Options.InferWorkerCommand is set;
//  4. Options.FallbackCommand, for a worker that has no command (none by
//     default).
//
// Each annotation is read from the MPIJob's metadata and, where the key is
// absent there, from the Worker pod template's metadata. The command goes
// into the Worker's first container, where both MPI operators run MPI.
package mutate
