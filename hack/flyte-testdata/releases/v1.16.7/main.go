// Command flyte-testdata-v1.16.7 builds the Flyte testdata with Flyte's
// backend v1.16.7: flyteplugins' mpi plugin, with flytepropeller's part done
// by the generator shared with every release (../../generator), since the
// Go module proxy does not serve flytepropeller v1.16.7 (its flyteplugins
// reads the configuration package of flytepropeller v1.16.8, the nearest served).
package main

import (
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator"
	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/plugin"
)

func main() {
	generator.Main(generator.Backend{
		Module:   "hack/flyte-testdata/releases/v1.16.7",
		Releases: "flyteplugins v1.16.7", // as in go.mod
		Builder:  "flyteplugins' mpi plugin (BuildResource; flytepropeller's part as v1.9.12 and v1.16.8 do it)",
		Setup:    plugin.Setup,
		Build:    plugin.Build,
	})
}
