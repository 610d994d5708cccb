package operator

import (
	"context"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// PolicyAloneLabel sends a Flyte MPIJob to the admission policies of
// config/policy-only, and to no webhook (InstallPolicyAlone).
const PolicyAloneLabel = "test.mpi.flyte.org/policy-alone"

// InstallPolicyAlone installs config/policy-only, as rendered, for the Flyte
// MPIJobs labelled PolicyAloneLabel, and makes every webhook configuration
// installed so far skip them: no webhook server is ever asked about them.
func (c *Cluster) InstallPolicyAlone(ctx context.Context) {
	GinkgoHelper()
	root, err := fixtures.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	m, err := manifests.Render(filepath.Join(root, "config", "policy-only"), "")
	Expect(err).NotTo(HaveOccurred())
	Expect(c.Env.LeaveLabelled(ctx, PolicyAloneLabel)).To(Succeed())
	Expect(c.Env.InstallPolicies(ctx, m, PolicyAloneLabel)).To(Succeed())
}

// CreateThroughPolicy creates the Flyte-built job name (testdata/flyte) in
// namespace, labelled PolicyAloneLabel, checks that the policy recorded the
// source fixtures.FlyteExpected gives it (none: unchanged), and returns the
// job as sent and as stored.
func (c *Cluster) CreateThroughPolicy(ctx context.Context, namespace, name string) (sent, stored *unstructured.Unstructured) {
	GinkgoHelper()
	expected, ok := fixtures.FlyteExpected(fixtures.NewestFlyteRelease, name)
	Expect(ok).To(BeTrue(), "no expected source for %s", name)
	source := mutate.Source(expected.Policy)
	stored = c.Env.Job(namespace, name).Label(PolicyAloneLabel, "true").Obj()
	sent = c.Create(ctx, stored)
	if source == mutate.SourceNone {
		Expect(stored.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
	} else {
		Expect(stored.GetAnnotations()).To(HaveKeyWithValue(mutate.AnnotationWorkerCommandSource, string(source)))
	}
	return sent, stored
}
