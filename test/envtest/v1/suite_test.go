// Package v1_test runs the webhook's envtest specs against the MPIJob CRD of kubeflow.org/v1.
package v1_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL
	. "github.com/onsi/gomega"    //nolint:revive // Gomega's DSL

	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/specs"
)

func TestEnvtest(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "envtest kubeflow.org/v1")
}

var env *framework.Env

var _ = BeforeSuite(func(ctx SpecContext) {
	var err error
	env, err = framework.Start(ctx, "v1")
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(framework.StartTimeout))

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

var _ = specs.DescribeWebhook(func() *framework.Env { return env })

var _ = specs.DescribeInstall(func() *framework.Env { return env })
