// Command propeller is Flyte's own controller, flytepropeller v1.16.8, with
// flyteplugins' mpi plugin alone, as make test-cluster runs it on the
// cluster: flytepropeller's own command line (its --config, as
// docs/CLUSTER.md gives it), built here rather than from flytepropeller's
// main, which links every plugin. Its workflow subcommand prints the
// FlyteWorkflow of one task (hack/flyte-testdata's cases, with
// flyte-backend launch's flags: test/flyte), for the controller to run once
// it is created:
//
//	propeller --config propeller.yaml
//	propeller workflow -case mpi-plain -namespace NS -cpu 100m -retries 1 | kubectl create -f -
package main

import (
	"fmt"
	"os"

	_ "github.com/flyteorg/flyte/flyteplugins/go/tasks/plugins/k8s/kfoperators/mpi" // registers the "mpi" k8s plugin
	"github.com/flyteorg/flyte/flytepropeller/cmd/controller/cmd"

	"github.com/flyteorg/flyte-mpi-webhook/test/flyte/backend"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "workflow" {
		if err := backend.Workflow(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "propeller workflow: %v\n", err)
			os.Exit(2)
		}
		return
	}
	cmd.Execute()
}
