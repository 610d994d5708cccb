package propeller

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"
	stderrors "github.com/flyteorg/flyte/flytestdlib/errors"

	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/task"
)

// launchResult is what Flyte makes of one task's first attempt: the phase
// the plugin manager reports, with its reason and execution error, or the
// error Handle returned, which flytepropeller records as a system error of
// the workflow and retries the round on.
type launchResult struct {
	// Phase is the transition's phase (pluginmachinery/core.Phase), e.g. Queued, PermanentFailure.
	Phase string `json:"phase,omitempty"`
	// Reason is the phase's reason.
	Reason string `json:"reason,omitempty"`
	// Error is the phase's execution error, which the user sees in the execution.
	Error *executionError `json:"error,omitempty"`
	// HandleError is the error Handle returned, when it returned one.
	HandleError *handleError `json:"handleError,omitempty"`
}

// executionError is a flyteidl core.ExecutionError.
type executionError struct {
	Code    string `json:"code"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// handleError is an error Handle returned: its flytestdlib error code, if
// any, and its message.
type handleError struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

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
	fs.StringVar(&f.name, "case", "", "the case of cases.go whose task to run")
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
	c, err := generator.CaseNamed(f.name)
	if err != nil {
		return nil, generator.Execution{}, err
	}
	generator.AddTaskAnnotations(c.Task, f.taskAnnotations)
	if f.workerCommand != "" {
		var command []string
		if err := json.Unmarshal([]byte(f.workerCommand), &command); err != nil || len(command) == 0 {
			return nil, generator.Execution{}, fmt.Errorf("-worker-command %s is not a JSON list of words: %v", f.workerCommand, err)
		}
		if err := generator.SetWorkerCommand(c.Task, command); err != nil {
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
	c.Execution.Labels = mergeInto(maps.Clone(c.Execution.Labels), f.labels)
	c.Execution.Namespace = f.ns
	return tmpl, c.Execution, nil
}

// Launch is the launch subcommand: it runs Flyte's backend on one case's
// task with a real client to the API server of -kubeconfig, so that the
// MPIJob goes through whatever admission that API server runs, and prints
// what Flyte reports as JSON (launchResult) on out.
func Launch(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server to create the MPIJob in")
	createOwner := fs.Bool("create-owner", false, "create the FlyteWorkflow that owns the MPIJob first, labelled "+
		terminationStatusLabel+"="+terminated+" so that a running flytepropeller leaves it alone: where the API server "+
		"serves FlyteWorkflows, the garbage collector deletes a job whose owner does not exist")
	var flags taskFlags
	flags.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return fmt.Errorf("launch needs -kubeconfig")
	}
	tmpl, execution, err := flags.task()
	if err != nil {
		return err
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", *kubeconfig, err)
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	kubeClient, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("a client for %s: %w", cfg.Host, err)
	}

	var result launchResult
	transition, err := launch(ctx, kubeClient, tmpl, execution, *createOwner)
	if err != nil {
		code, _ := stderrors.GetErrorCode(err)
		result.HandleError = &handleError{Code: code, Message: err.Error()}
	} else {
		info := transition.Info()
		result.Phase, result.Reason = info.Phase().String(), info.Reason()
		if e := info.Err(); e != nil {
			result.Error = &executionError{Code: e.GetCode(), Kind: e.GetKind().String(), Message: e.GetMessage()}
		}
	}
	return json.NewEncoder(out).Encode(result)
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
