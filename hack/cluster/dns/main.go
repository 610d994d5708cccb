// Command coredns is CoreDNS with the plugins make test-cluster's cluster
// DNS needs, and no others: errors and kubernetes, which answers for the
// cluster's Services and Pods (cluster.local), as a cluster's CoreDNS does.
// mpi-operator's hostfile names each worker by its name behind the job's
// headless Service, which only a cluster DNS resolves. A main of one's own
// with a list of plugins is how CoreDNS is built with fewer of them
// (core/plugin/zplugin.go links them all, with their clouds' SDKs).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func init() {
	// The order in which the plugins see a query: CoreDNS's own (plugin.cfg).
	dnsserver.Directives = []string{"errors", "kubernetes"}
}

func main() { coremain.Run() }
