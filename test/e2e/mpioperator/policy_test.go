package mpioperator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/flyteorg/flyte-mpi-webhook/test/e2e/operator"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// The admission policy alone (config/policy-only), no webhook asked: what
// mpi-operator's worker Pods run.
var _ = Describe("mpi-operator v0.8.2, through the admission policy alone", Ordered, func() {
	BeforeAll(func(ctx SpecContext) { cluster.InstallPolicyAlone(ctx) })

	var namespace string
	BeforeEach(func(ctx SpecContext) { namespace = cluster.Namespace(ctx) })

	DescribeTable("a Flyte-built job",
		func(ctx SpecContext, name string, sshd bool) {
			sent, job := cluster.CreateThroughPolicy(ctx, namespace, name)
			if sshd {
				Expect(workerPods(ctx, job)).To(HaveEach(operator.Runs(fixtures.SSHD, nil)))
			} else { // mpi-operator leaves a container with args alone
				Expect(workerPods(ctx, job)).To(HaveEach(operator.Runs(nil, operator.Args(sent, "Worker"))))
			}
			Expect(launcherPod(ctx, job)).To(operator.Runs(nil, operator.Args(sent, "Launcher")))
		},
		Entry("Worker(command=sshd…): every worker runs sshd", fixtures.HorovodWorkerCommand, true),
		Entry("a Horovod task that declares no worker command: left as it is, every worker runs its args, as the operator makes it",
			fixtures.HorovodNoWorkerCommand, false),
		Entry("a plain MPI task: left as it is, every worker runs its args, as the operator makes it",
			fixtures.MPIPlain, false),
	)
})
