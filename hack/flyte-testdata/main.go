// Command flyte-testdata builds MPIJobs with Flyte's own backend, v1.16.8,
// and writes them as the webhook's testdata: TaskTemplates as flytekit
// serializes them go through flytepropeller's compiler and FlyteWorkflow
// builder, then through flytepropeller's k8s PluginManager with
// flyteplugins' mpi plugin, which create the kubeflow.org/v1 MPIJob in a fake
// Kubernetes client. Each job is written to <out>/v1/<case>.yaml and,
// derived from it, to <out>/v2beta1/<case>.yaml. The older releases have
// tools modules of their own under releases/. See README.md; the tests run
// the same backend with a real client to an API server (test/flyte).
package main

import (
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/plugin"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/propeller"
)

func main() {
	generator.Main(generator.Backend{
		Module:   "hack/flyte-testdata",
		Releases: "flyteplugins/flytepropeller v1.16.8", // as in go.mod
		Builder:  "flytepropeller's k8s PluginManager and flyteplugins' mpi plugin",
		Setup:    propeller.Setup,
		Build:    propeller.Build,
		// The backend of the releases whose flytepropeller is not served
		// must build the same jobs as flytepropeller does.
		CrossCheck: plugin.Build,
	})
}
