package trainingoperator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/flyteorg/flyte-mpi-webhook/test/e2e/operator"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// The admission policy alone (config/policy-only), no webhook asked: what
// training-operator's worker Pods run.
var _ = Describe("training-operator v1.8.1, through the admission policy alone", Ordered, func() {
	BeforeAll(func(ctx SpecContext) { cluster.InstallPolicyAlone(ctx) })

	var namespace string
	BeforeEach(func(ctx SpecContext) { namespace = cluster.Namespace(ctx) })

	DescribeTable("a Flyte-built job",
		func(ctx SpecContext, name string, command, args []string) {
			sent, job := cluster.CreateThroughPolicy(ctx, namespace, name)
			Expect(pods(ctx, job, "worker")).To(HaveEach(operator.Runs(command, args)))
			Expect(pods(ctx, job, "launcher")).To(HaveEach(operator.Runs(nil, operator.Args(sent, "Launcher"))))
		},
		Entry("Worker(command=sshd…): every worker runs sshd", fixtures.HorovodWorkerCommand, fixtures.SSHD, nil),
		Entry("a Horovod task that declares no worker command: left as it is, every worker runs `sleep 365d`, "+
			"as the operator makes it, for the launcher to reach by kubectl exec",
			fixtures.HorovodNoWorkerCommand,
			sleep, sleepArgs),
		Entry("a plain MPI task: left as it is, every worker runs `sleep 365d`, as the operator makes it",
			fixtures.MPIPlain,
			sleep, sleepArgs),
	)
})
