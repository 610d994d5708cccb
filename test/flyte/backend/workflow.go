package backend

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"reflect"

	"github.com/flyteorg/flyte/flyteidl/gen/pb-go/flyteidl/core"
	"github.com/flyteorg/flyte/flytepropeller/pkg/apis/flyteworkflow/v1alpha1"

	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/propeller"
)

// Workflow is the workflow subcommand: it prints, as JSON, the FlyteWorkflow
// of an execution of a one-node workflow around one case's task, built as
// flytepropeller's kubectl-flyte create builds one (compiler.CompileTask,
// compiler.CompileWorkflow, k8s.BuildFlyteWorkflow) with flyteadmin's
// metadata, for a running flytepropeller to execute once it is created in
// -namespace. It takes launch's flags (but -kubeconfig), and -retries.
func Workflow(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("workflow", flag.ContinueOnError)
	var flags taskFlags
	flags.register(fs)
	retries := fs.Uint("retries", 0, "how many times Flyte retries the task after a retryable failure, as @task(retries=...) sets it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tmpl, execution, err := flags.task()
	if err != nil {
		return err
	}
	if tmpl.GetMetadata() == nil {
		return fmt.Errorf("case %s: the task has no metadata to hold -retries", flags.name)
	}
	tmpl.Metadata.Retries = &core.RetryStrategy{Retries: uint32(*retries)}
	wf, err := propeller.BuildFlyteWorkflow(tmpl, execution)
	if err != nil {
		return err
	}
	// The API server gives the FlyteWorkflow its UID when it is created.
	wf.UID = ""
	// The kind flyteadmin's clientset sends, its scheme's name for the type:
	// BuildFlyteWorkflow's own, v1alpha1.FlyteWorkflowKind, is lower case,
	// which the API server refuses.
	wf.Kind = reflect.TypeFor[v1alpha1.FlyteWorkflow]().Name()
	b, err := json.Marshal(wf)
	if err != nil {
		return fmt.Errorf("encoding the FlyteWorkflow of case %s: %w", flags.name, err)
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
