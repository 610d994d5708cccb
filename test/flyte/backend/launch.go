// Package backend runs Flyte's own backend, v1.16.8, on one case of the
// Flyte testdata generator (hack/flyte-testdata/generator/cases.go), as the
// tests need it: Launch creates the case's MPIJob through a real API server,
// as flytepropeller's k8s PluginManager does, and prints what Flyte reports
// (test/e2e/flyte, test/cluster); Workflow prints the case's FlyteWorkflow,
// for a running flytepropeller to execute (test/cluster/propeller). Both
// run the generator's backend (hack/flyte-testdata/generator/propeller),
// which builds testdata/flyte with a fake client. See ../README.md.
package backend

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"
	pluginscore "github.com/flyteorg/flyte/flyteplugins/go/tasks/pluginmachinery/core"
	"github.com/flyteorg/flyte/flytepropeller/pkg/apis/flyteworkflow/v1alpha1"
	stderrors "github.com/flyteorg/flyte/flytestdlib/errors"

	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/propeller"
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

// Launch is the launch subcommand: it runs Flyte's backend on one case's
// task with a real client to the API server of -kubeconfig, so that the
// MPIJob goes through whatever admission that API server runs, and prints
// what Flyte reports as JSON (launchResult) on out. Run propeller.Setup
// first, as flytepropeller does at start-up.
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
	scheme, err := propeller.NewScheme()
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

// launch runs the first round of Flyte's backend on one task, as
// flytepropeller runs a new task node: it builds the FlyteWorkflow, and
// flytepropeller's k8s PluginManager, with flyteplugins' mpi plugin and
// kubeClient, handles the task's first attempt, which creates its MPIJob.
// It returns what Handle returns: the transition Flyte reports, or the
// error that flytepropeller takes for a system error. With createOwner, the
// FlyteWorkflow is created through kubeClient first (createTerminatedOwner).
func launch(ctx context.Context, kubeClient client.Client, tmpl *core.TaskTemplate, exec generator.Execution,
	createOwner bool) (pluginscore.Transition, error) {
	wf, err := propeller.BuildFlyteWorkflow(tmpl, exec)
	if err != nil {
		return pluginscore.Transition{}, err
	}
	if createOwner {
		if err := createTerminatedOwner(ctx, kubeClient, wf); err != nil {
			return pluginscore.Transition{}, err
		}
	}
	return propeller.HandleFirstAttempt(ctx, kubeClient, wf)
}

// terminationStatusLabel is the label by which flytepropeller leaves alone
// a FlyteWorkflow it has finished with (its controller's
// IgnoreCompletedWorkflowsLabelSelector), with its value.
const terminationStatusLabel, terminated = "termination-status", "terminated"

// createTerminatedOwner creates wf, the owner that the MPIJob's owner
// reference names, as finished (terminationStatusLabel), and gives wf the
// UID the API server gave it: on a cluster that serves FlyteWorkflows, its
// garbage collector deletes a job whose owner does not exist, and a running
// flytepropeller leaves a finished workflow alone, so that the job is the
// plugin manager's here alone.
func createTerminatedOwner(ctx context.Context, kubeClient client.Client, wf *v1alpha1.FlyteWorkflow) error {
	owner := wf.DeepCopy()
	owner.UID = ""
	labels := map[string]string{}
	maps.Copy(labels, owner.Labels)
	labels[terminationStatusLabel] = terminated
	owner.Labels = labels
	if err := kubeClient.Create(ctx, owner); err != nil {
		return fmt.Errorf("creating the FlyteWorkflow %s/%s that owns the job: %w", owner.Namespace, owner.Name, err)
	}
	wf.UID = owner.UID
	return nil
}
