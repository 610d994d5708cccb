package backend

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"

	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/task"
)

// keyValues is a repeatable KEY=VALUE flag.
type keyValues map[string]string

func (kv keyValues) String() string { return fmt.Sprint(map[string]string(kv)) }

func (kv keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	kv[k] = v
	return nil
}

// taskFlags are the flags that shape a case's task as flytekit would
// serialize it, and its execution: launch's and workflow's.
type taskFlags struct {
	ns, name, cpu, workerCommand string
	taskAnnotations, labels, env keyValues
}

// register defines the flags on fs.
func (f *taskFlags) register(fs *flag.FlagSet) {
	f.taskAnnotations, f.labels, f.env = keyValues{}, keyValues{}, keyValues{}
	fs.StringVar(&f.ns, "namespace", "", "namespace to run the task in (default: flyteadmin's "+generator.Namespace+")")
	fs.StringVar(&f.name, "case", "", "the case of hack/flyte-testdata/generator/cases.go whose task to run")
	fs.Var(f.taskAnnotations, "task-annotation", "KEY=VALUE to add to the task's @task(annotations=...); repeatable")
	fs.Var(f.labels, "execution-label", "KEY=VALUE to add to the execution's labels; repeatable")
	fs.StringVar(&f.cpu, "cpu", "", "CPU the task's containers ask for, as @task(requests=Resources(cpu=...), limits=Resources(cpu=...)) sets it; empty: Flyte's default")
	fs.Var(f.env, "env", "KEY=VALUE to add to the task's @task(environment=...); repeatable")
	fs.StringVar(&f.workerCommand, "worker-command", "", `the worker command the task declares, Worker(command=[...]), as a JSON list such as '["sh", "-c", "..."]'; empty: the case's`)
}

// task returns the case's task with the flags applied, and its execution.
func (f *taskFlags) task() (*core.TaskTemplate, generator.Execution, error) {
	if f.name == "" {
		return nil, generator.Execution{}, fmt.Errorf("-case is not set")
	}
	c, err := caseNamed(f.name)
	if err != nil {
		return nil, generator.Execution{}, err
	}
	addTaskAnnotations(c.Task, f.taskAnnotations)
	if f.workerCommand != "" {
		var command []string
		if err := json.Unmarshal([]byte(f.workerCommand), &command); err != nil || len(command) == 0 {
			return nil, generator.Execution{}, fmt.Errorf("-worker-command %s is not a JSON list of words: %v", f.workerCommand, err)
		}
		if err := setWorkerCommand(c.Task, command); err != nil {
			return nil, generator.Execution{}, fmt.Errorf("-worker-command: %w", err)
		}
	}
	tmpl, _, err := task.Decode(c)
	if err != nil {
		return nil, generator.Execution{}, err
	}
	if f.cpu != "" {
		if err := setTaskCPU(tmpl, f.cpu); err != nil {
			return nil, generator.Execution{}, err
		}
	}
	if err := addTaskEnvironment(tmpl, f.env); err != nil {
		return nil, generator.Execution{}, err
	}
	// The case's labels and the flags', which win; the case's own map is left alone.
	labels := map[string]string{}
	maps.Copy(labels, c.Execution.Labels)
	maps.Copy(labels, f.labels)
	c.Execution.Labels = labels
	c.Execution.Namespace = f.ns
	return tmpl, c.Execution, nil
}

// caseNamed returns the case of the generator called name.
func caseNamed(name string) (generator.Case, error) {
	all, err := generator.Cases()
	if err != nil {
		return generator.Case{}, err
	}
	for _, c := range all {
		if c.Name == name {
			return c, nil
		}
	}
	return generator.Case{}, fmt.Errorf("no case %q in hack/flyte-testdata/generator/cases.go", name)
}

// addTaskAnnotations adds annotations to the metadata of taskJSON, a case's
// TaskTemplate as protobuf JSON, where flytekit writes
// @task(annotations=...). It leaves the case's own maps alone.
func addTaskAnnotations(taskJSON map[string]any, annotations map[string]string) {
	if len(annotations) == 0 {
		return
	}
	metadata := maps.Clone(taskJSON["metadata"].(map[string]any))
	k8s, _ := metadata["metadata"].(map[string]any)
	k8s = maps.Clone(k8s)
	if k8s == nil {
		k8s = map[string]any{}
	}
	merged, _ := k8s["annotations"].(map[string]any)
	merged = maps.Clone(merged)
	if merged == nil {
		merged = map[string]any{}
	}
	for k, v := range annotations {
		merged[k] = v
	}
	k8s["annotations"] = merged
	metadata["metadata"] = k8s
	taskJSON["metadata"] = metadata
}

// setWorkerCommand makes taskJSON, a case's TaskTemplate of task_type_version 1
// as protobuf JSON, declare Worker(command=command), as flytekit writes it
// in the custom's workerReplicas. It leaves the case's own maps alone.
func setWorkerCommand(taskJSON map[string]any, command []string) error {
	custom, _ := taskJSON["custom"].(map[string]any)
	worker, _ := custom["workerReplicas"].(map[string]any)
	if worker == nil {
		return fmt.Errorf("the task's custom has no workerReplicas (a task_type_version 0 case?)")
	}
	custom, worker = maps.Clone(custom), maps.Clone(worker)
	worker["command"] = command
	custom["workerReplicas"] = worker
	taskJSON["custom"] = custom
	return nil
}

// addTaskEnvironment adds env to the environment of tmpl's container, as
// flytekit serializes @task(environment=env): Flyte gives it to the
// Launcher's and the Workers' containers alike.
func addTaskEnvironment(tmpl *core.TaskTemplate, env map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	container := tmpl.GetContainer()
	if container == nil {
		return fmt.Errorf("-env: the task has no container (a pod_template case?)")
	}
	for _, key := range slices.Sorted(maps.Keys(env)) {
		container.Env = append(container.Env, &core.KeyValuePair{Key: key, Value: env[key]})
	}
	return nil
}

// setTaskCPU sets the CPU request and limit of tmpl's container, as flytekit
// serializes @task(requests=Resources(cpu=cpu), limits=Resources(cpu=cpu)):
// make test-cluster runs Flyte's job of three Pods on a node of two CPUs.
func setTaskCPU(tmpl *core.TaskTemplate, cpu string) error {
	container := tmpl.GetContainer()
	if container == nil {
		return fmt.Errorf("-cpu %s: the task has no container (a pod_template case?)", cpu)
	}
	entry := []*core.Resources_ResourceEntry{{Name: core.Resources_CPU, Value: cpu}}
	container.Resources = &core.Resources{Requests: entry, Limits: entry}
	return nil
}
