// Command flyte-testdata-v1.9.12 builds the Flyte testdata with Flyte's
// backend v1.9.12: flytepropeller's k8s PluginManager and flyteplugins' mpi
// plugin, the same generator as hack/flyte-testdata's (../../generator).
package main

import (
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/plugin"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/propeller"
)

func main() {
	generator.Main(generator.Backend{
		Module:   "hack/flyte-testdata/releases/v1.9.12",
		Releases: "flyteplugins/flytepropeller v1.9.12", // as in go.mod
		Builder:  "flytepropeller's k8s PluginManager and flyteplugins' mpi plugin",
		Setup:    propeller.Setup,
		Build:    propeller.Build,
		// The backend of the releases whose flytepropeller is not served
		// must build the same jobs as flytepropeller does.
		CrossCheck: plugin.Build,
	})
}
