// Command flyte-backend runs Flyte's own backend, v1.16.8 (flytepropeller's
// k8s PluginManager with flyteplugins' mpi plugin), on one case's task with a
// real client to an API server, so that the MPIJob goes through that API
// server's admission, the webhook included, and prints what Flyte reports
// (test/e2e/flyte, test/cluster; see README.md):
//
//	flyte-backend launch -kubeconfig FILE -case NAME [-namespace NS] ...
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/flyteorg/flyte-mpi-webhook/hack/flyte-testdata/generator/propeller"

	"github.com/flyteorg/flyte-mpi-webhook/test/flyte/backend"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "launch" {
		fmt.Fprintf(os.Stderr, "usage: %s launch -kubeconfig FILE -case NAME [flags]\n", os.Args[0])
		os.Exit(2)
	}
	if err := propeller.Setup(); err != nil {
		fmt.Fprintf(os.Stderr, "%s launch: %v\n", os.Args[0], err)
		os.Exit(1)
	}
	if err := backend.Launch(context.Background(), os.Args[2:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s launch: %v\n", os.Args[0], err)
		os.Exit(1)
	}
}
