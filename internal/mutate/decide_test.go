package mutate

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	kubeflowmpi "github.com/flyteorg/flyteidl/gen/pb-go/flyteidl/plugins/kubeflow"
	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// The task customs and commands of the Flyte tasks under test.
var (
	workerCommand       = fixtures.WorkerCommand
	flytekitCustom      = fixtures.FlytekitCustom
	snakeCaseCustom     = fixtures.SnakeCaseCustom
	newerCustom         = fixtures.NewerCustom
	legacyCustom        = fixtures.LegacyCustom
	noCommandCustom     = fixtures.NoWorkerCommandCustom
	flytekitSpecCommand = fixtures.WorkerCommandLine
)

func binaryCustom(t testing.TB, command ...string) string {
	t.Helper()
	b, err := proto.Marshal(protoadapt.MessageV2Of(&kubeflowmpi.DistributedMPITrainingTask{
		WorkerReplicas:   &kubeflowmpi.DistributedMPITrainingReplicaSpec{Replicas: 2, Command: command},
		LauncherReplicas: &kubeflowmpi.DistributedMPITrainingReplicaSpec{Replicas: 1},
		Slots:            1,
	}))
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// commandPatch is the patch that makes the MPI container of a Flyte worker run
// workerCommand, the worker carrying args and the job carrying annotations.
func commandPatch(source Source) []jsonpatch.Operation {
	c := "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0"
	return []jsonpatch.Operation{
		{Operation: "add", Path: c + "/command", Value: workerCommand},
		{Operation: "remove", Path: c + "/args"},
		{Operation: "add", Path: "/metadata/annotations/mpi.flyte.org~1worker-command-source", Value: string(source)},
	}
}

func TestDecide(t *testing.T) {
	type result struct {
		Outcome       Outcome
		Source        Source
		Container     int
		ContainerName string
		Command, Args []string
		Warnings      []string
		Err           string
		Patch         []jsonpatch.Operation
	}
	mutated := func(source Source) result {
		return result{Outcome: OutcomeMutated, Source: source, Container: 0, ContainerName: "mpi", Command: workerCommand,
			Patch: commandPatch(source)}
	}
	// mutatedUnannotated is mutated for a job without annotations, which the patch adds.
	mutatedUnannotated := func(source Source) result {
		r := mutated(source)
		r.Patch = append(commandPatch(source)[:2], jsonpatch.Operation{Operation: "add", Path: "/metadata/annotations",
			Value: map[string]string{AnnotationWorkerCommandSource: string(source)}})
		return r
	}
	unchangedNoCommand := result{Outcome: OutcomeUnchanged, Source: SourceNone, Container: -1}
	denied := func(msg string) result {
		return result{Outcome: OutcomeDeniedInvalid, Source: SourceNone, Container: -1, Err: msg}
	}

	cases := map[string]struct {
		job  *Job
		opts func(*Options)
		want result
	}{
		"flytekit's camelCase custom": {
			job:  flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).obj(),
			want: mutated(SourceTaskCustom),
		},
		"snake_case custom": {
			job:  flyteJob().annotation(AnnotationTaskCustom, snakeCaseCustom).obj(),
			want: mutated(SourceTaskCustom),
		},
		"fields this flyteidl does not know are ignored": {
			job:  flyteJob().annotation(AnnotationTaskCustom, newerCustom).obj(),
			want: mutated(SourceTaskCustom),
		},
		"an enum value this flyteidl does not know is ignored": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":{"restartPolicy":"RESTART_POLICY_SOMETIMES","command":["/bin/sh","-c","mkdir -p /tmp/scratch && exec sleep infinity"]}}`).obj(),
			want: mutated(SourceTaskCustom),
		},
		"base64 binary protobuf custom": {
			job:  flyteJob().annotation(AnnotationTaskCustom, binaryCustom(t, workerCommand...)).obj(),
			want: mutated(SourceTaskCustom),
		},
		"custom with a UTF-8 byte order mark": {
			job:  flyteJob().annotation(AnnotationTaskCustom, "\ufeff"+flytekitCustom).obj(),
			want: mutated(SourceTaskCustom),
		},
		"custom with surrounding blanks": {
			job:  flyteJob().annotation(AnnotationTaskCustom, "\n  "+flytekitCustom+"\n").obj(),
			want: mutated(SourceTaskCustom),
		},
		"type version 1 given": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				annotation(AnnotationTaskTypeVersion, "1").obj(),
			want: mutated(SourceTaskCustom),
		},
		"legacy custom with worker-spec-command": {
			job: flyteJob().annotation(AnnotationTaskCustom, legacyCustom).
				annotation(AnnotationWorkerSpecCommand, flytekitSpecCommand).obj(),
			want: mutated(SourceWorkerSpecCommand),
		},
		"legacy custom with type version 0": {
			job: flyteJob().annotation(AnnotationTaskCustom, legacyCustom).annotation(AnnotationTaskTypeVersion, "0").
				annotation(AnnotationWorkerSpecCommand, flytekitSpecCommand).obj(),
			want: mutated(SourceWorkerSpecCommand),
		},
		"type version 0 reads no command even from a kubeflow custom": {
			job:  flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).annotation(AnnotationTaskTypeVersion, "0").obj(),
			want: unchangedNoCommand,
		},
		"legacy custom alone carries no command": {
			job:  flyteJob().annotation(AnnotationTaskCustom, legacyCustom).obj(),
			want: unchangedNoCommand,
		},
		"worker-spec-command split as a shell would, not on single spaces": {
			job:  flyteJob().annotation(AnnotationWorkerSpecCommand, "  /bin/sh  -c\t'mkdir -p /tmp/scratch'\" && exec sleep infinity\"  ").obj(),
			want: mutated(SourceWorkerSpecCommand),
		},
		"a command in the custom wins over worker-spec-command": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				annotation(AnnotationWorkerSpecCommand, "/bin/other").obj(),
			want: mutated(SourceTaskCustom),
		},
		"a custom without a command leaves it to worker-spec-command": {
			job: flyteJob().annotation(AnnotationTaskCustom, noCommandCustom).
				annotation(AnnotationWorkerSpecCommand, flytekitSpecCommand).obj(),
			want: mutated(SourceWorkerSpecCommand),
		},
		"an empty command in the custom leaves it to worker-spec-command": {
			job: flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":{"command":[]}}`).
				annotation(AnnotationWorkerSpecCommand, flytekitSpecCommand).obj(),
			want: mutated(SourceWorkerSpecCommand),
		},
		"fallback when no annotation gives a command": {
			job:  flyteJob().annotation(AnnotationTaskCustom, noCommandCustom).obj(),
			opts: func(o *Options) { o.FallbackCommand = workerCommand },
			want: mutated(SourceFallback),
		},
		"fallback for a Flyte job without annotations": {
			job:  flyteJob().obj(),
			opts: func(o *Options) { o.FallbackCommand = workerCommand },
			want: mutatedUnannotated(SourceFallback),
		},
		"annotations only on the worker pod template": {
			job: flyteJob().workerAnnotation(AnnotationTaskCustom, legacyCustom).
				workerAnnotation(AnnotationWorkerSpecCommand, flytekitSpecCommand).obj(),
			want: mutatedUnannotated(SourceWorkerSpecCommand),
		},
		"the job's annotation wins over the worker template's": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				workerAnnotation(AnnotationTaskCustom, "not even JSON").obj(),
			want: mutated(SourceTaskCustom),
		},
		"keys are looked up one by one": {
			job: flyteJob().annotation(AnnotationTaskCustom, legacyCustom).
				workerAnnotation(AnnotationWorkerSpecCommand, flytekitSpecCommand).obj(),
			want: mutated(SourceWorkerSpecCommand),
		},
		"inject as args, Flyte's PR #341": {
			job:  flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).obj(),
			opts: func(o *Options) { o.InjectAs = InjectArgs },
			want: result{Outcome: OutcomeMutated, Source: SourceTaskCustom, ContainerName: "mpi", Args: workerCommand,
				Patch: []jsonpatch.Operation{
					{Operation: "add", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/args", Value: workerCommand},
					{Operation: "add", Path: "/metadata/annotations/mpi.flyte.org~1worker-command-source", Value: "task-custom"},
				}},
		},
		"inject split": {
			job:  flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).obj(),
			opts: func(o *Options) { o.InjectAs = InjectSplit },
			want: result{Outcome: OutcomeMutated, Source: SourceTaskCustom, ContainerName: "mpi",
				Command: workerCommand[:1], Args: workerCommand[1:],
				Patch: []jsonpatch.Operation{
					{Operation: "add", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/command", Value: workerCommand[:1]},
					{Operation: "add", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/args", Value: workerCommand[1:]},
					{Operation: "add", Path: "/metadata/annotations/mpi.flyte.org~1worker-command-source", Value: "task-custom"},
				}},
		},
		"inject split of a one-word command removes args": {
			job:  flyteJob().annotation(AnnotationWorkerSpecCommand, "/usr/sbin/sshd").obj(),
			opts: func(o *Options) { o.InjectAs = InjectSplit },
			want: result{Outcome: OutcomeMutated, Source: SourceWorkerSpecCommand, ContainerName: "mpi",
				Command: []string{"/usr/sbin/sshd"},
				Patch: []jsonpatch.Operation{
					{Operation: "add", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/command", Value: []string{"/usr/sbin/sshd"}},
					{Operation: "remove", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/args"},
					{Operation: "add", Path: "/metadata/annotations/mpi.flyte.org~1worker-command-source", Value: "worker-spec-command"},
				}},
		},
		"a container that already runs the command is left alone": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				containers(Container{Name: "mpi", Command: list(workerCommand...)}).obj(),
			want: result{Outcome: OutcomeUnchanged, Source: SourceTaskCustom, ContainerName: "mpi", Command: workerCommand},
		},
		"an empty args list counts as no args": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				containers(Container{Name: "mpi", Command: list(workerCommand...), Args: list()}).obj(),
			want: result{Outcome: OutcomeUnchanged, Source: SourceTaskCustom, ContainerName: "mpi", Command: workerCommand},
		},
		"the right command with stray args: only args go": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				containers(Container{Name: "mpi", Command: list(workerCommand...), Args: list("x")}).obj(),
			want: result{Outcome: OutcomeMutated, Source: SourceTaskCustom, ContainerName: "mpi", Command: workerCommand,
				Patch: commandPatch(SourceTaskCustom)[1:]},
		},
		"the first container, where both operators run MPI, even with the container named mpi after it": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				containers(Container{Name: "sidecar", Args: list("proxy")}, Container{Name: "mpi", Args: list(taskArgs...)}).obj(),
			want: result{Outcome: OutcomeMutated, Source: SourceTaskCustom, ContainerName: "sidecar", Command: workerCommand,
				Warnings: []string{`spec.mpiReplicaSpecs.Worker.template.spec.containers[1]: is named "mpi", but the MPI operators use the first container, "sidecar": the training-operator launcher starts the ranks there with kubectl exec, and mpi-operator mounts the SSH keys there and runs sshd there by default; the worker command goes there too; put the MPI container first`},
				Patch:    commandPatch(SourceTaskCustom)},
		},
		"the first container when none has the name": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				containers(Container{Name: "main", Args: list(taskArgs...)}, Container{Name: "sidecar"}).obj(),
			want: result{Outcome: OutcomeMutated, Source: SourceTaskCustom, ContainerName: "main", Command: workerCommand,
				Patch: commandPatch(SourceTaskCustom)},
		},
		"--container-name names the container expected first": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				containers(Container{Name: "horovod", Args: list(taskArgs...)}, Container{Name: "mpi"}).obj(),
			opts: func(o *Options) { o.ContainerName = "horovod" },
			want: result{Outcome: OutcomeMutated, Source: SourceTaskCustom, ContainerName: "horovod",
				Command: workerCommand, Patch: commandPatch(SourceTaskCustom)},
		},
		"a sidecar before the MPI container: a warning, even with no command to inject": {
			job: flyteJob().containers(Container{Name: "sidecar"}, Container{Name: "mpi", Args: list(workerCommand...)}).obj(),
			want: result{Outcome: OutcomeUnchanged, Source: SourceNone, Container: -1,
				Warnings: []string{`spec.mpiReplicaSpecs.Worker.template.spec.containers[1]: is named "mpi", but the MPI operators use the first container, "sidecar": the training-operator launcher starts the ranks there with kubectl exec, and mpi-operator mounts the SSH keys there and runs sshd there by default; the worker command goes there too; put the MPI container first`}},
		},
		"duplicate container names: the first": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				containers(Container{Name: "mpi", Args: list(taskArgs...)}, Container{Name: "mpi"}).obj(),
			want: mutated(SourceTaskCustom),
		},
		"no Worker replica: unchanged, with a warning": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).noWorker().obj(),
			want: result{Outcome: OutcomeUnchanged, Source: SourceTaskCustom, Container: -1,
				Warnings: []string{"spec.mpiReplicaSpecs.Worker: missing, so the worker command from task-custom was not injected"}},
		},
		"a Worker without containers: unchanged, with a warning": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).containers().obj(),
			want: result{Outcome: OutcomeUnchanged, Source: SourceTaskCustom, Container: -1,
				Warnings: []string{"spec.mpiReplicaSpecs.Worker.template.spec.containers: no containers, so the worker command from task-custom was not injected"}},
		},
		"not a Flyte task: skipped, annotation or not": {
			job:  flyteJob().labels(map[string]string{"app": "horovod"}).annotation(AnnotationTaskCustom, "garbage").obj(),
			want: result{Outcome: OutcomeSkippedNotFlyte, Source: SourceNone, Container: -1},
		},
		"one Flyte label is not enough": {
			job:  flyteJob().labels(map[string]string{"execution-id": "x"}).annotation(AnnotationTaskCustom, flytekitCustom).obj(),
			want: result{Outcome: OutcomeSkippedNotFlyte, Source: SourceNone, Container: -1},
		},
		"--flyte-task-selector": {
			job: flyteJob().labels(map[string]string{"team": "ml"}).annotation(AnnotationTaskCustom, flytekitCustom).obj(),
			opts: func(o *Options) {
				o.FlyteTaskSelector = labels.SelectorFromSet(labels.Set{"team": "ml"})
			},
			want: mutated(SourceTaskCustom),
		},
		"a Flyte job without annotations whose task declares no worker command: unchanged": {
			job:  flyteJob().obj(),
			want: unchangedNoCommand,
		},
		"64 KiB of custom is accepted": {
			job:  flyteJob().annotation(AnnotationTaskCustom, padJSON(flytekitCustom, MaxAnnotationBytes)).obj(),
			want: mutated(SourceTaskCustom),
		},
		"an empty worker-spec-command is no command": {
			job:  flyteJob().annotation(AnnotationWorkerSpecCommand, "  ").obj(),
			want: unchangedNoCommand,
		},

		// The worker command the task declared, which Flyte writes into the worker's args.
		"a declared worker command in the worker's args": {
			job:  flyteJob().workerArgs(workerCommand...).obj(),
			want: mutatedUnannotated(SourceFlyteWorkerArgs),
		},
		"a declared worker command, with --inject-as=args: already right": {
			job:  flyteJob().workerArgs(workerCommand...).obj(),
			opts: func(o *Options) { o.InjectAs = InjectArgs },
			want: result{Outcome: OutcomeUnchanged, Source: SourceFlyteWorkerArgs, ContainerName: "mpi", Args: workerCommand},
		},
		"a declared worker command, with --inject-as=split": {
			job:  flyteJob().workerArgs(workerCommand...).obj(),
			opts: func(o *Options) { o.InjectAs = InjectSplit },
			want: result{Outcome: OutcomeMutated, Source: SourceFlyteWorkerArgs, ContainerName: "mpi",
				Command: workerCommand[:1], Args: workerCommand[1:],
				Patch: []jsonpatch.Operation{
					{Operation: "add", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/command", Value: workerCommand[:1]},
					{Operation: "add", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/args", Value: workerCommand[1:]},
					{Operation: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationWorkerCommandSource: "flyte-worker-args"}},
				}},
		},
		"no declared worker command: the worker copies the launcher": {
			job:  flyteJob().obj(),
			want: unchangedNoCommand,
		},
		"only a declared launcher command: the worker still runs the task": {
			job:  flyteJob().launcherContainers(Container{Name: "mpi", Args: list("mpirun", "--allow-run-as-root", "-np", "2")}).obj(),
			want: unchangedNoCommand,
		},
		"declared launcher and worker commands": {
			job: flyteJob().launcherContainers(Container{Name: "mpi", Args: list("mpirun", "--allow-run-as-root", "-np", "2")}).
				workerArgs(workerCommand...).obj(),
			want: mutatedUnannotated(SourceFlyteWorkerArgs),
		},
		"any pyflyte-*-execute entrypoint is the task's": {
			job: flyteJob().launcherContainers(Container{Name: "mpi", Args: list("mpirun")}).
				workerArgs("/opt/venv/bin/pyflyte-fast-execute", "--additional-distribution", "s3://x", "--", "pyflyte-execute").obj(),
			want: unchangedNoCommand,
		},
		"worker args equal to the launcher's are a copy": {
			job:  flyteJob().launcherContainers(Container{Name: "mpi", Args: list(workerCommand...)}).workerArgs(workerCommand...).obj(),
			want: unchangedNoCommand,
		},
		"no Launcher: no inference, with a warning": {
			job: flyteJob().noLauncher().workerArgs(workerCommand...).obj(),
			want: result{Outcome: OutcomeUnchanged, Source: SourceNone, Container: -1,
				Warnings: []string{"spec.mpiReplicaSpecs.Launcher: missing, so the Worker's args were not taken for a worker command the task declared"}},
		},
		"a Launcher without containers: no inference, with a warning": {
			job: flyteJob().launcherContainers().workerArgs(workerCommand...).obj(),
			want: result{Outcome: OutcomeUnchanged, Source: SourceNone, Container: -1,
				Warnings: []string{"spec.mpiReplicaSpecs.Launcher.template.spec.containers: no containers, so the Worker's args were not taken for a worker command the task declared"}},
		},
		"declared args whose first word is empty (Flyte's legacy split of \" sshd -D\"): left as Flyte made them, with a warning": {
			job: flyteJob().workerArgs("", "sshd", "-D").obj(),
			want: result{Outcome: OutcomeUnchanged, Source: SourceNone, Container: -1,
				Warnings: []string{"spec.mpiReplicaSpecs.Worker.template.spec.containers[0].args[0]: is empty, so the Worker's args were not taken " +
					"for a worker command the task declared: no container runtime can start a program with an empty name"}},
		},
		"args whose first word is empty, a copy of the launcher's: no warning": {
			job:  flyteJob().launcherContainers(Container{Name: "mpi", Args: list("", "sshd")}).workerArgs("", "sshd").obj(),
			want: unchangedNoCommand,
		},
		"no Launcher, and a worker that runs the task: no warning": {
			job:  flyteJob().noLauncher().obj(),
			want: unchangedNoCommand,
		},
		"a worker that has a command already is left alone": {
			job:  flyteJob().containers(Container{Name: "mpi", Command: list("/bin/sh"), Args: list("-c", "sshd")}).obj(),
			opts: func(o *Options) { o.FallbackCommand = workerCommand },
			want: unchangedNoCommand,
		},
		"an empty command counts as none": {
			job:  flyteJob().containers(Container{Name: "mpi", Command: list(), Args: list(workerCommand...)}).obj(),
			want: mutatedUnannotated(SourceFlyteWorkerArgs),
		},
		"--infer-worker-command=false": {
			job:  flyteJob().workerArgs(workerCommand...).obj(),
			opts: func(o *Options) { o.InferWorkerCommand = false },
			want: unchangedNoCommand,
		},
		"--infer-worker-command=false leaves it to the fallback": {
			job:  flyteJob().workerArgs("/bin/true").annotation("team", "ml").obj(),
			opts: func(o *Options) { o.InferWorkerCommand = false; o.FallbackCommand = workerCommand },
			want: mutated(SourceFallback),
		},
		"the custom's command wins over the declared args": {
			job:  flyteJob().workerArgs("/bin/true").annotation(AnnotationTaskCustom, flytekitCustom).obj(),
			want: mutated(SourceTaskCustom),
		},
		"worker-spec-command wins over the declared args": {
			job:  flyteJob().workerArgs("/bin/true").annotation(AnnotationWorkerSpecCommand, flytekitSpecCommand).obj(),
			want: mutated(SourceWorkerSpecCommand),
		},
		"a custom without a command leaves it to the declared args": {
			job:  flyteJob().workerArgs(workerCommand...).annotation(AnnotationTaskCustom, noCommandCustom).obj(),
			want: mutated(SourceFlyteWorkerArgs),
		},
		"the declared args win over the fallback": {
			job:  flyteJob().workerArgs(workerCommand...).annotation("team", "ml").obj(),
			opts: func(o *Options) { o.FallbackCommand = []string{"/bin/false"} },
			want: mutated(SourceFlyteWorkerArgs),
		},
		// A task that declares no worker command needs none: the
		// training-operator's launcher starts the ranks in the sleeping
		// workers with kubectl exec. Its job is left as Flyte made it,
		// whether the launcher runs horovodrun (flyteJob's) or mpirun.
		"a plain MPI task's worker (mpirun) is left alone": {
			job: flyteJob().launcherContainers(Container{Name: "mpi", Args: list("mpirun", "-np", "2", "pyflyte-execute")}).
				workerArgs("mpirun", "-np", "2", "pyflyte-execute").obj(),
			want: unchangedNoCommand,
		},
		"declared horovodrun args are a declared worker command": {
			job: flyteJob().workerArgs("horovodrun", "--check-build").obj(),
			want: result{Outcome: OutcomeMutated, Source: SourceFlyteWorkerArgs, ContainerName: "mpi",
				Command: []string{"horovodrun", "--check-build"},
				Patch: []jsonpatch.Operation{
					{Operation: "add", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/command", Value: []string{"horovodrun", "--check-build"}},
					{Operation: "remove", Path: "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/args"},
					{Operation: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationWorkerCommandSource: "flyte-worker-args"}},
				}},
		},
		"the fallback serves a plain MPI worker": {
			job:  flyteJob().workerArgs("mpirun", "pyflyte-execute").obj(),
			opts: func(o *Options) { o.FallbackCommand = workerCommand },
			want: mutatedUnannotated(SourceFallback),
		},
		"an invalid annotation denies even when the worker declares a command": {
			job:  flyteJob().workerArgs(workerCommand...).annotation(AnnotationTaskCustom, "{").obj(),
			want: denied("mpi.flyte.org/task-custom: invalid JSON: unexpected end of JSON input"),
		},

		// Invalid annotations.
		"custom not JSON": {
			job:  flyteJob().annotation(AnnotationTaskCustom, "{workerReplicas:").obj(),
			want: denied("mpi.flyte.org/task-custom: invalid JSON: invalid character 'w' looking for beginning of object key string"),
		},
		"custom neither JSON nor base64": {
			job:  flyteJob().annotation(AnnotationTaskCustom, "sshd -De").obj(),
			want: denied("mpi.flyte.org/task-custom: is neither a JSON object nor standard base64: illegal base64 data at input byte 4"),
		},
		"custom is garbage protobuf": {
			job:  flyteJob().annotation(AnnotationTaskCustom, base64.StdEncoding.EncodeToString([]byte{0x0a, 0xff, 0xff})).obj(),
			want: denied("mpi.flyte.org/task-custom: base64 protobuf of flyteidl.plugins.kubeflow.DistributedMPITrainingTask: proto: cannot parse invalid wire-format data"),
		},
		"custom is base64 protobuf of fields no task custom has": {
			job:  flyteJob().annotation(AnnotationTaskCustom, "KAE=").obj(),
			want: denied("mpi.flyte.org/task-custom: base64 protobuf of flyteidl.plugins.kubeflow.DistributedMPITrainingTask: its 2 bytes hold no field of that message"),
		},
		"custom command is a string": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":{"command":"/usr/sbin/sshd -De"}}`).obj(),
			want: denied("mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings"),
		},
		"custom command holds a number": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"worker_replicas":{"command":["sshd",1]}}`).obj(),
			want: denied("mpi.flyte.org/task-custom: worker_replicas.command[1]: expected a string"),
		},
		"custom replicas is not a number": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":{"replicas":"two"}}`).obj(),
			want: denied("mpi.flyte.org/task-custom: workerReplicas.replicas: expected a number"),
		},
		"custom workerReplicas is a list": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":[]}`).obj(),
			want: denied("mpi.flyte.org/task-custom: workerReplicas: expected an object"),
		},
		"legacy custom with a wrong type": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"numWorkers":true}`).obj(),
			want: denied("mpi.flyte.org/task-custom: numWorkers: expected a number"),
		},
		"custom is empty": {
			job:  flyteJob().annotation(AnnotationTaskCustom, " ").obj(),
			want: denied("mpi.flyte.org/task-custom: is empty; expected the task custom as JSON or as base64 protobuf"),
		},
		"custom over 64 KiB": {
			job:  flyteJob().annotation(AnnotationTaskCustom, padJSON(flytekitCustom, MaxAnnotationBytes+1)).obj(),
			want: denied("mpi.flyte.org/task-custom: is 65537 bytes, more than the 65536 allowed"),
		},
		"custom command with an empty program name": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":{"command":["","-De"]}}`).obj(),
			want: denied("mpi.flyte.org/task-custom: the program name (the first word) is empty"),
		},
		"custom command with a NUL byte": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":{"command":["sshd","-f\u0000x"]}}`).obj(),
			want: denied("mpi.flyte.org/task-custom: word 1 contains a NUL byte"),
		},
		"type version 7": {
			job: flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).
				annotation(AnnotationTaskTypeVersion, "7").obj(),
			want: denied(`mpi.flyte.org/task-type-version: "7" is not a task type version of Flyte's MPI task; expected "0" or "1"`),
		},
		"an invalid custom denies even when worker-spec-command is fine": {
			job: flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":{"command":"x"}}`).
				annotation(AnnotationWorkerSpecCommand, flytekitSpecCommand).obj(),
			want: denied("mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings"),
		},
		"worker-spec-command with an unterminated quote": {
			job:  flyteJob().annotation(AnnotationWorkerSpecCommand, `/usr/sbin/sshd -f '/home/jobuser`).obj(),
			want: denied(`mpi.flyte.org/worker-spec-command: "/usr/sbin/sshd -f '/home/jobuser" is not a valid command line: the single quote at byte 18 is never closed`),
		},
		"worker-spec-command with a shell operator": {
			job:  flyteJob().annotation(AnnotationWorkerSpecCommand, `/usr/sbin/sshd -De; sleep 1`).obj(),
			want: denied(`mpi.flyte.org/worker-spec-command: "/usr/sbin/sshd -De; sleep 1" has the shell operator ";" at byte 18; no shell runs the worker command, so quote it`),
		},
		"worker-spec-command over 64 KiB": {
			job:  flyteJob().annotation(AnnotationWorkerSpecCommand, "sshd "+strings.Repeat("x", MaxAnnotationBytes)).obj(),
			want: denied("mpi.flyte.org/worker-spec-command: is 65541 bytes, more than the 65536 allowed"),
		},
		"an invalid annotation on the worker template denies too": {
			job:  flyteJob().workerAnnotation(AnnotationTaskCustom, "{").obj(),
			want: denied("mpi.flyte.org/task-custom: invalid JSON: unexpected end of JSON input"),
		},
		"--on-invalid=warn admits unchanged, with the reason": {
			job:  flyteJob().annotation(AnnotationTaskCustom, `{"workerReplicas":{"command":"x"}}`).obj(),
			opts: func(o *Options) { o.OnInvalid = InvalidWarn },
			want: result{Outcome: OutcomeWarnedInvalid, Source: SourceNone, Container: -1,
				Err:      "mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings",
				Warnings: []string{"mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings; the MPIJob was admitted unchanged"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts := DefaultOptions()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			d := Decide(tc.job, opts)
			got := result{Outcome: d.Outcome, Source: d.Source, Container: d.Container, ContainerName: d.ContainerName,
				Command: d.Command, Args: d.Args, Warnings: d.Warnings, Patch: d.Patch}
			if d.Err != nil {
				// protobuf's messages vary their spaces on purpose, so that no one matches them exactly
				got.Err = strings.ReplaceAll(d.Err.Error(), "\u00a0", " ")
				var annotationErr *AnnotationError
				if !errors.As(d.Err, &annotationErr) {
					t.Errorf("Err is a %T, want an *AnnotationError", d.Err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
		})
	}
}

// padJSON pads a JSON object with blanks to exactly n bytes.
func padJSON(object string, n int) string {
	return object[:len(object)-1] + strings.Repeat(" ", n-len(object)) + "}"
}

func TestDecideDoesNotChangeTheJob(t *testing.T) {
	job := flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).obj()
	before := flyteJob().annotation(AnnotationTaskCustom, flytekitCustom).obj()
	Decide(job, DefaultOptions())
	if diff := cmp.Diff(before, job); diff != "" {
		t.Errorf("the job changed (-before +after):\n%s", diff)
	}
}
