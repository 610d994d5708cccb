package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/admin"
	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"
)

// The user's code that every case serializes: a flytesnacks-style module
// kfmpi_plugin/mpi_mnist.py with a task horovod_train_task called by the
// workflow horovod_training_wf, registered as version v1.
const (
	taskModule   = "kfmpi_plugin.mpi_mnist"
	taskFunction = "horovod_train_task"
	workflowName = taskModule + ".horovod_training_wf"
	taskVersion  = "v1"
	image        = "ghcr.io/flyteorg/flytecookbook:kfmpi-horovod"
	// entrypointPath is flytekit's SerializationSettings.entrypoint_settings
	// for the default interpreter /opt/venv/bin/python3.
	entrypointPath = "/opt/venv/bin/entrypoint.py"
)

// adminRawOutputDataConfig is flyteadmin's raw output location for the
// execution (its sandbox default).
var adminRawOutputDataConfig = admin.RawOutputDataConfig{OutputLocationPrefix: rawDataPrefix}

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

// testCase is one task as flytekit serializes it, with the execution
// metadata flyteadmin adds.
type testCase struct {
	// Name is the file name under v1/ and v2beta1/, without .yaml.
	Name string
	// Declaration is the flytekit code that declares the task, for the header.
	Declaration []string
	// Task is the TaskTemplate as flytekit writes it.
	Task *core.TaskTemplate
	// Execution is the launch plan's or execution's metadata.
	Execution execution
}

// cases returns every task the generator builds, in file order.
func cases() ([]testCase, error) {
	horovodWorker := horovodCustom(sshdCommand, nil)
	horovodWorkerJSON, err := json.Marshal(horovodWorker)
	if err != nil {
		return nil, fmt.Errorf("encoding the horovod custom: %w", err)
	}
	optIn := map[string]string{
		annotationTaskCustom:  string(horovodWorkerJSON),
		annotationTypeVersion: "1",
	}

	var out []testCase
	add := func(name string, decl []string, tmpl *core.TaskTemplate, err error, exec execution) error {
		if err != nil {
			return fmt.Errorf("case %s: %w", name, err)
		}
		out = append(out, testCase{Name: name, Declaration: decl, Task: tmpl, Execution: exec})
		return nil
	}

	tmpl, err := flytekit116Task(horovodArgs(), horovodWorker, taskOptions{})
	if err := add("horovod-worker-command", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1),`,
		`    worker=Worker(replicas=2, command=["/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"])))`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, nil), taskOptions{})
	if err := add("horovod-no-worker-command", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2)))`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, nil), taskOptions{podTemplateAnnotations: optIn})
	if err := add("horovod-pod-template-annotation", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2)),`,
		`    pod_template=PodTemplate(annotations={"mpi.flyte.org/task-custom": CUSTOM, "mpi.flyte.org/task-type-version": "1"}))`,
		`(CUSTOM: the custom of the horovod-worker-command task, as in the annotation below)`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, nil), taskOptions{taskAnnotations: optIn})
	if err := add("horovod-task-annotations", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2)),`,
		`    annotations={"mpi.flyte.org/task-custom": CUSTOM, "mpi.flyte.org/task-type-version": "1"})`,
		`(CUSTOM: the custom of the horovod-worker-command task, as in the annotation below)`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, nil), taskOptions{})
	if err := add("horovod-launch-plan-annotations", []string{
		`@task(task_config=HorovodJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2))) run by`,
		`    LaunchPlan.get_or_create(wf, annotations=Annotations({"mpi.flyte.org/task-custom": CUSTOM, "mpi.flyte.org/task-type-version": "1"}))`,
		`(CUSTOM: the custom of the horovod-worker-command task, as in the annotation below)`,
	}, tmpl, err, execution{Annotations: optIn}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(nil, launcherCommand), taskOptions{})
	if err := add("horovod-launcher-command", []string{
		`@task(task_config=HorovodJob(worker=Worker(replicas=2), launcher=Launcher(replicas=1,`,
		`    command=["mpirun", "--allow-run-as-root", "-np", "2", "python", "/root/kfmpi_plugin/mpi_mnist.py"])))`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(horovodArgs(), horovodCustom(sshdCommand, launcherCommand), taskOptions{})
	if err := add("horovod-both-commands", []string{
		`@task(task_config=HorovodJob(`,
		`    launcher=Launcher(replicas=1, command=["mpirun", "--allow-run-as-root", "-np", "2", "python", "/root/kfmpi_plugin/mpi_mnist.py"]),`,
		`    worker=Worker(replicas=2, command=["/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"])))`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(mpirunArgs(2), horovodCustom(nil, nil), taskOptions{})
	if err := add("mpi-plain", []string{
		`@task(task_config=MPIJob(launcher=Launcher(replicas=1), worker=Worker(replicas=2)))`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit116Task(append(fastExecutePrefix(), horovodArgs()...), horovodWorker, taskOptions{})
	if err := add("horovod-fast-register-worker-command", []string{
		`the horovod-worker-command task registered by pyflyte register (fast registration, the default),`,
		`    which puts flytekit's pyflyte-fast-execute prefix in front of the container args`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}

	tmpl, err = flytekit16LegacyHorovodTask()
	if err := add("legacy-v0-worker-spec-command", []string{
		`flytekit 1.6 (task_type_version 0): @task(task_config=HorovodJob(slots=1, num_launcher_replicas=1, num_workers=2)),`,
		`    whose HorovodFunctionTask wrote config worker_spec_command="/usr/sbin/sshd -De -f /home/jobuser/.sshd_config"`,
	}, tmpl, err, execution{}); err != nil {
		return nil, err
	}
	return out, nil
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
		"task-module", taskModule, "task-name", taskFunction,
	}
}

// fastExecutePrefix is flytekit's get_command_prefix_for_fast_execute as
// pyflyte register fills it: the uploaded code archive and the default
// destination directory ".".
func fastExecutePrefix() []string {
	return []string{
		"pyflyte-fast-execute",
		"--additional-distribution",
		"s3://my-s3-bucket/" + project + "/" + domain + "/UFJ6KDMRDJTF3EZ2AMZOYJ3DQU======/fast3c1e5b2f7a9d4e6c8b0a1f2e3d4c5b6a.tar.gz",
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
// and Task.metadata.to_taskmetadata_model).
func flytekit116Task(args []string, custom map[string]any, opts taskOptions) (*core.TaskTemplate, error) {
	customStruct, err := toStruct(custom)
	if err != nil {
		return nil, fmt.Errorf("custom: %w", err)
	}
	container := &core.Container{
		Image:     image,
		Command:   []string{},
		Args:      args,
		Resources: &core.Resources{},
		Env:       []*core.KeyValuePair{},
	}
	tmpl := &core.TaskTemplate{
		Id:              taskIdentifier(),
		Type:            "mpi",
		TaskTypeVersion: 1,
		Metadata: &core.TaskMetadata{
			Runtime: &core.RuntimeMetadata{Type: core.RuntimeMetadata_FLYTE_SDK, Version: "1.16.8", Flavor: "python"},
			Retries: &core.RetryStrategy{},
			Metadata: &core.K8SObjectMetadata{
				Annotations: opts.taskAnnotations,
			},
		},
		Interface: emptyInterface(),
		Custom:    customStruct,
		Config:    map[string]string{},
	}
	if opts.podTemplateAnnotations == nil {
		tmpl.Target = &core.TaskTemplate_Container{Container: container}
		return tmpl, nil
	}

	// With a pod_template, flytekit writes no container but a K8sPod whose
	// spec holds the primary container (default name "primary", command and
	// args of the task, env as a list) and names it in the config.
	podSpec, err := toStruct(map[string]any{
		"containers": []any{map[string]any{
			"name":    "primary",
			"image":   image,
			"command": []string{},
			"args":    args,
			"env":     []any{},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("pod spec: %w", err)
	}
	tmpl.Target = &core.TaskTemplate_K8SPod{K8SPod: &core.K8SPod{
		Metadata: &core.K8SObjectMetadata{Annotations: opts.podTemplateAnnotations},
		PodSpec:  podSpec,
	}}
	tmpl.Config = map[string]string{"primary_container_name": "primary"}
	return tmpl, nil
}

// flytekit16LegacyHorovodTask is the TaskTemplate flytekit 1.6.x (the only
// releases with both HorovodJob and task_type_version 0) serializes for
// HorovodJob(slots=1, num_launcher_replicas=1, num_workers=2): custom is
// flyteidl.plugins.DistributedMPITrainingTask, the worker command travels in
// the config, and the args are the horovodrun prefix in front of
// MPIFunctionTask's mpirun command.
func flytekit16LegacyHorovodTask() (*core.TaskTemplate, error) {
	customStruct, err := toStruct(map[string]any{"numWorkers": 2, "numLauncherReplicas": 1, "slots": 1})
	if err != nil {
		return nil, fmt.Errorf("custom: %w", err)
	}
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
	return &core.TaskTemplate{
		Id:              taskIdentifier(),
		Type:            "mpi",
		TaskTypeVersion: 0,
		Metadata: &core.TaskMetadata{
			Runtime: &core.RuntimeMetadata{Type: core.RuntimeMetadata_FLYTE_SDK, Version: "1.6.2", Flavor: "python"},
			Retries: &core.RetryStrategy{},
		},
		Interface: emptyInterface(),
		Custom:    customStruct,
		Target: &core.TaskTemplate_Container{Container: &core.Container{
			Image:     image,
			Command:   []string{},
			Args:      args,
			Resources: &core.Resources{},
			Env:       []*core.KeyValuePair{},
		}},
		Config: map[string]string{"worker_spec_command": "/usr/sbin/sshd -De -f /home/jobuser/.sshd_config"},
	}, nil
}

func taskIdentifier() *core.Identifier {
	return &core.Identifier{
		ResourceType: core.ResourceType_TASK,
		Project:      project,
		Domain:       domain,
		Name:         taskModule + "." + taskFunction,
		Version:      taskVersion,
	}
}

// emptyInterface is the interface of a task with no inputs and no outputs.
func emptyInterface() *core.TypedInterface {
	return &core.TypedInterface{
		Inputs:  &core.VariableMap{Variables: map[string]*core.Variable{}},
		Outputs: &core.VariableMap{Variables: map[string]*core.Variable{}},
	}
}

// toStruct converts a JSON-shaped value to a protobuf Struct, as flytekit's
// MessageToDict output is stored: every number becomes a double.
func toStruct(v map[string]any) (*structpb.Struct, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %v: %w", v, err)
	}
	s := &structpb.Struct{}
	if err := s.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("decoding %s as a Struct: %w", b, err)
	}
	return s, nil
}
