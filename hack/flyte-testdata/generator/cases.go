package generator

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The user's code that every case serializes: a flytesnacks-style module
// kfmpi_plugin/mpi_mnist.py with a task horovod_train_task called by the
// workflow horovod_training_wf, registered as version v1.
const (
	taskModule = "kfmpi_plugin.mpi_mnist"
	// TaskFunction is the task's Python function, the name of its workflow node.
	TaskFunction = "horovod_train_task"
	// WorkflowName is the workflow that calls the task.
	WorkflowName = taskModule + ".horovod_training_wf"
	taskVersion  = "v1"
	image        = "ghcr.io/flyteorg/flytecookbook:kfmpi-horovod"
	// entrypointPath is flytekit's SerializationSettings.entrypoint_settings
	// for the default interpreter /opt/venv/bin/python3.
	entrypointPath = "/opt/venv/bin/entrypoint.py"
)

// sshdCommand is the worker command flytekitplugins-kfmpi's README declares
// and flytekit 1.6 wrote as worker_spec_command.
var sshdCommand = []string{"/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"}

// launcherCommand is a Launcher(command=...) a user would declare: mpirun
// over the two workers, running the training script.
var launcherCommand = []string{"mpirun", "--allow-run-as-root", "-np", "2", "python", "/root/kfmpi_plugin/mpi_mnist.py"}

// The annotations a user adds to opt a job into the webhook's task-custom
// rule. The value is the custom of the horovod-worker-command task.
const (
	annotationTaskCustom  = "mpi.flyte.org/task-custom"
	annotationTypeVersion = "mpi.flyte.org/task-type-version"
)

// Case is one task as flytekit serializes it, with the execution metadata
// flyteadmin adds.
type Case struct {
	// Name is the file name under v1/ and v2beta1/, without .yaml.
	Name string
	// Declaration is the flytekit code that declares the task, for the header.
	Declaration []string
	// Task is the TaskTemplate as flytekit writes it, in its protobuf JSON
	// form, so that every release decodes it with its own flyteidl: a field
	// that release's flyteidl lacks is dropped, as its flyteadmin drops it.
	Task map[string]any
	// SDKVersion is the flytekit release that serialized Task.
	SDKVersion string
	// Execution is the launch plan's or execution's metadata.
	Execution Execution
}

// Cases returns every task the generator builds, in file order.
func Cases() ([]Case, error) {
	horovodWorker := horovodCustom(sshdCommand, nil)
	horovodWorkerJSON, err := json.Marshal(horovodWorker)
	if err != nil {
		return nil, fmt.Errorf("encoding the horovod custom: %w", err)
	}
	optIn := map[string]string{
		annotationTaskCustom:  string(horovodWorkerJSON),
		annotationTypeVersion: "1",
	}

	var out []Case
	add := func(name string, decl []string, tmpl map[string]any, err error, exec Execution) error {
		if err != nil {
			return fmt.Errorf("case %s: %w", name, err)
		}
		sdk, _ := tmpl["metadata"].(map[string]any)["runtime"].(map[string]any)["version"].(string)
		out = append(out, Case{Name: name, Declaration: decl, Task: tmpl, SDKVersion: sdk, Execution: exec})
		return nil
	}

	tmpl, err := flytekit116Task(horovodArgs(), horovodWorker, taskOptions{})
	if err := add("horovod-worker-command", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1),`,
		`    worker=Worker(replicas=2, command=["/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"])))`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, nil), taskOptions{})
	if err := add("horovod-no-worker-command", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2)))`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, nil), taskOptions{podTemplateAnnotations: optIn})
	if err := add("horovod-pod-template-annotation", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2)),`,
		`    pod_template=PodTemplate(annotations={"mpi.flyte.org/task-custom": CUSTOM, "mpi.flyte.org/task-type-version": "1"}))`,
		`(CUSTOM: the custom of the horovod-worker-command task, as in the annotation below)`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, nil), taskOptions{taskAnnotations: optIn})
	if err := add("horovod-task-annotations", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2)),`,
		`    annotations={"mpi.flyte.org/task-custom": CUSTOM, "mpi.flyte.org/task-type-version": "1"})`,
		`(CUSTOM: the custom of the horovod-worker-command task, as in the annotation below)`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, nil), taskOptions{})
	if err := add("horovod-launch-plan-annotations", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2))) run by`,
		`    LaunchPlan.get_or_create(wf, annotations=Annotations({"mpi.flyte.org/task-custom": CUSTOM, "mpi.flyte.org/task-type-version": "1"}))`,
		`(CUSTOM: the custom of the horovod-worker-command task, as in the annotation below)`,
	}, tmpl, err, Execution{Annotations: optIn}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, launcherCommand), taskOptions{})
	if err := add("horovod-launcher-command", []string{
		`@task(task_config=HorovodJob(worker=Worker(replicas=2), launcher=Launcher(replicas=1,`,
		`    command=["mpirun", "--allow-run-as-root", "-np", "2", "python", "/root/kfmpi_plugin/mpi_mnist.py"])))`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(sshdCommand, launcherCommand), taskOptions{})
	if err := add("horovod-both-commands", []string{
		`@task(task_config=HorovodJob(`,
		`    launcher=Launcher(replicas=1, command=["mpirun", "--allow-run-as-root", "-np", "2", "python", "/root/kfmpi_plugin/mpi_mnist.py"]),`,
		`    worker=Worker(replicas=2, command=["/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"])))`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(mpirunArgs(2), horovodCustom(nil, nil), taskOptions{})
	if err := add("mpi-plain", []string{
		`@task(task_config=MPIJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2)))`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(append(fastExecutePrefix(), horovodArgs()...), horovodWorker, taskOptions{})
	if err := add("horovod-fast-register-worker-command", []string{
		`the horovod-worker-command task registered by pyflyte register (fast registration, the default),`,
		`    which puts flytekit's pyflyte-fast-execute prefix in front of the container args`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit16LegacyHorovodTask(strings.Join(sshdCommand, " "))
	if err := add("legacy-v0-worker-spec-command", []string{
		`flytekit 1.6 (task_type_version 0): @task(task_config=HorovodJob(slots=1, num_launcher_replicas=1, num_workers=2)),`,
		`    whose HorovodFunctionTask wrote config worker_spec_command="/usr/sbin/sshd -De -f /home/jobuser/.sshd_config"`,
	}, tmpl, err, Execution{}); err != nil {
		return nil, err
	}
	return out, nil
}

// UpstreamCases returns the tasks that only the comparison of Flyte with the
// upstream fix (hack/upstream, docs/UPSTREAM.md) builds, in file order: jobs
// where the fix and the webhook could disagree, beyond Cases' own.
func UpstreamCases() ([]Case, error) {
	// A worker_spec_command that starts with a space: flytepropeller splits it
	// on single spaces, so the worker's args start with an empty word, which
	// neither the fix nor the webhook makes a command.
	tmpl, err := flytekit16LegacyHorovodTask(" " + strings.Join(sshdCommand, " "))
	if err != nil {
		return nil, fmt.Errorf("case legacy-v0-worker-spec-command-leading-space: %w", err)
	}
	sdk, _ := tmpl["metadata"].(map[string]any)["runtime"].(map[string]any)["version"].(string)
	return []Case{{
		Name: "legacy-v0-worker-spec-command-leading-space",
		Declaration: []string{
			`the legacy-v0-worker-spec-command task (task_type_version 0) with a worker_spec_command that starts with a space,`,
			`    " /usr/sbin/sshd -De -f /home/jobuser/.sshd_config": split on single spaces, its first word is empty`,
		},
		Task:       tmpl,
		SDKVersion: sdk,
	}}, nil
}

// pyflyteExecuteArgs is flytekit's PythonAutoContainerTask.get_default_command
// for the default task resolver, as `pyflyte serialize` and a non-fast
// `pyflyte register` write it.
func pyflyteExecuteArgs() []string {
	return []string{
		"pyflyte-execute",
		"--inputs", "{{.input}}",
		"--output-prefix", "{{.outputPrefix}}",
		"--raw-output-data-prefix", "{{.rawOutputDataPrefix}}",
		"--checkpoint-path", "{{.checkpointOutputPrefix}}",
		"--prev-checkpoint", "{{.prevCheckpointPrefix}}",
		"--resolver", "flytekit.core.python_auto_container.default_task_resolver",
		"--",
		"task-module", taskModule, "task-name", TaskFunction,
	}
}

// fastExecutePrefix is flytekit's get_command_prefix_for_fast_execute as
// pyflyte register fills it: the uploaded code archive and the default
// destination directory ".".
func fastExecutePrefix() []string {
	return []string{
		"pyflyte-fast-execute",
		"--additional-distribution",
		"s3://my-s3-bucket/" + Project + "/" + Domain + "/UFJ6KDMRDJTF3EZ2AMZOYJ3DQU======/fast3c1e5b2f7a9d4e6c8b0a1f2e3d4c5b6a.tar.gz",
		"--dest-dir", ".",
		"--",
	}
}

// horovodArgs is flytekit 1.16's HorovodFunctionTask.get_command for two
// workers, one slot each and the HorovodJob defaults.
func horovodArgs() []string {
	const np = "2"
	prefix := []string{
		"horovodrun",
		"-np", np,
		"--log-level", "INFO",
		"--network-interface", "eth0",
		"--min-np", np,
		"--max-np", np,
		"--slots-per-host", "1",
		"--host-discovery-script", "/etc/mpi/discover_hosts.sh",
		"--elastic-timeout", "1200",
	}
	return append(prefix, pyflyteExecuteArgs()...)
}

// mpirunArgs is flytekit's MPIFunctionTask.get_command (unchanged from 1.6
// to 1.16) for numProcs processes.
func mpirunArgs(numProcs int) []string {
	prefix := []string{
		"mpirun", "--allow-run-as-root",
		"-bind-to", "none",
		"-map-by", "slot",
		"-x", "LD_LIBRARY_PATH",
		"-x", "PATH",
		"-x", "NCCL_DEBUG=INFO",
		"-mca", "pml", "ob1",
		"-mca", "btl", "^openib",
		"-np", strconv.Itoa(numProcs),
		"python", entrypointPath,
	}
	return append(prefix, pyflyteExecuteArgs()...)
}

// horovodCustom is flytekit 1.16's MPIFunctionTask.get_custom
// (MessageToDict of flyteidl.plugins.kubeflow.DistributedMPITrainingTask) for
// Worker(replicas=2, command=worker), Launcher(replicas=1,
// command=launcher) and slots=1. flytekit always sets resources, to an empty
// message when none are given.
func horovodCustom(worker, launcher []string) map[string]any {
	replica := func(n int, command []string) map[string]any {
		r := map[string]any{"replicas": n, "resources": map[string]any{}}
		if command != nil {
			r["command"] = command
		}
		return r
	}
	return map[string]any{
		"slots":            1,
		"workerReplicas":   replica(2, worker),
		"launcherReplicas": replica(1, launcher),
	}
}

// taskOptions are the @task arguments a case adds.
type taskOptions struct {
	// taskAnnotations is @task(annotations=...): TaskMetadata.metadata.
	taskAnnotations map[string]string
	// podTemplateAnnotations is @task(pod_template=PodTemplate(annotations=...)).
	podTemplateAnnotations map[string]string
}

// flytekit116Task is the TaskTemplate flytekit 1.16.8 serializes for an
// MPIFunctionTask or HorovodFunctionTask with the given container args and
// custom (PythonAutoContainerTask.get_container / get_k8s_pod / get_config
// and Task.metadata.to_taskmetadata_model), in protobuf JSON.
func flytekit116Task(args []string, custom map[string]any, opts taskOptions) (map[string]any, error) {
	metadata := map[string]any{
		"runtime": map[string]any{"type": "FLYTE_SDK", "version": "1.16.8", "flavor": "python"},
		"retries": map[string]any{},
	}
	if opts.taskAnnotations != nil {
		metadata["metadata"] = map[string]any{"annotations": stringMap(opts.taskAnnotations)}
	}
	tmpl := map[string]any{
		"id":              taskIdentifier(),
		"type":            "mpi",
		"taskTypeVersion": 1,
		"metadata":        metadata,
		"interface":       emptyInterface(),
		"custom":          custom,
		"config":          map[string]any{},
	}
	if opts.podTemplateAnnotations == nil {
		tmpl["container"] = map[string]any{
			"image":     image,
			"command":   []any{},
			"args":      anyList(args),
			"resources": map[string]any{},
			"env":       []any{},
		}
		return tmpl, nil
	}

	// With a pod_template, flytekit writes no container but a K8sPod whose
	// spec holds the primary container (default name "primary", command and
	// args of the task, env as a list) and names it in the config.
	tmpl["k8sPod"] = map[string]any{
		"metadata": map[string]any{"annotations": stringMap(opts.podTemplateAnnotations)},
		"podSpec": map[string]any{
			"containers": []any{map[string]any{
				"name":    "primary",
				"image":   image,
				"command": []any{},
				"args":    anyList(args),
				"env":     []any{},
			}},
		},
	}
	tmpl["config"] = map[string]any{"primary_container_name": "primary"}
	return tmpl, nil
}

// flytekit16LegacyHorovodTask is the TaskTemplate flytekit 1.6.x (the only
// releases with both HorovodJob and task_type_version 0) serializes for
// HorovodJob(slots=1, num_launcher_replicas=1, num_workers=2): custom is
// flyteidl.plugins.DistributedMPITrainingTask, the worker command travels in
// the config as workerSpecCommand, and the args are the horovodrun prefix in
// front of MPIFunctionTask's mpirun command.
func flytekit16LegacyHorovodTask(workerSpecCommand string) (map[string]any, error) {
	const np = "2"
	args := append([]string{
		"horovodrun",
		"-np", np,
		"--verbose",
		"--log-level", "INFO",
		"--network-interface", "eth0",
		"--min-np", np,
		"--max-np", np,
		"--slots-per-host", "1",
		"--host-discovery-script", "/etc/mpi/discover_hosts.sh",
	}, mpirunArgs(2)...)
	return map[string]any{
		"id":              taskIdentifier(),
		"type":            "mpi",
		"taskTypeVersion": 0,
		"metadata": map[string]any{
			"runtime": map[string]any{"type": "FLYTE_SDK", "version": "1.6.2", "flavor": "python"},
			"retries": map[string]any{},
		},
		"interface": emptyInterface(),
		"custom":    map[string]any{"numWorkers": 2, "numLauncherReplicas": 1, "slots": 1},
		"container": map[string]any{
			"image":     image,
			"command":   []any{},
			"args":      anyList(args),
			"resources": map[string]any{},
			"env":       []any{},
		},
		"config": map[string]any{"worker_spec_command": workerSpecCommand},
	}, nil
}

func taskIdentifier() map[string]any {
	return map[string]any{
		"resourceType": "TASK",
		"project":      Project,
		"domain":       Domain,
		"name":         taskModule + "." + TaskFunction,
		"version":      taskVersion,
	}
}

// emptyInterface is the interface of a task with no inputs and no outputs.
func emptyInterface() map[string]any {
	return map[string]any{
		"inputs":  map[string]any{"variables": map[string]any{}},
		"outputs": map[string]any{"variables": map[string]any{}},
	}
}

// TaskJSON is the case's TaskTemplate as protobuf JSON, for each release's
// flyteidl to decode.
func (c Case) TaskJSON() ([]byte, error) {
	b, err := json.Marshal(c.Task)
	if err != nil {
		return nil, fmt.Errorf("encoding the TaskTemplate of case %s: %w", c.Name, err)
	}
	return b, nil
}

func anyList(words []string) []any {
	out := make([]any, len(words))
	for i, w := range words {
		out[i] = w
	}
	return out
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
