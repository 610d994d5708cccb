package envtest_test

import (
	"context"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// describeUpstream declares, inside describePolicy's container and with its
// admit, the specs of the upstream fix (docs/UPSTREAM.md) through the API
// server: each job of fixtures.UpstreamJobs as Flyte v1.16.8 builds it with
// the fix, stored with no add-on, against Flyte's job as published, stored
// through each install (the webhook alone, the policy alone, both). Where the
// install takes the worker command the task declares, the two are the same
// job but the source annotation; where only the webhook reads it (an
// annotation), the fix's is Flyte's job as published; where nothing is
// declared, or nothing that can run, they are the same job. With the fix
// and an install both, the install stores what it stores today, but the
// source annotation, and warns the same. internal/mutate's
// TestUpstreamEquality holds the webhook's decisions to the same, and
// renders the table.
func describeUpstream(s *spec, admit func(context.Context, string, *unstructured.Unstructured) admitted) {
	installs := map[string]func(fixtures.Expectation) string{
		webhookAloneLabel: func(e fixtures.Expectation) string { return e.Webhook },
		policyAloneLabel:  func(e fixtures.Expectation) string { return e.Policy },
		bothLabel:         func(e fixtures.Expectation) string { return e.Webhook },
	}
	for _, name := range fixtures.UpstreamJobs {
		It("stores "+name+", as Flyte with the upstream fix builds it and with no add-on, as each install stores "+
			"Flyte's job as published, and as both together", func(ctx SpecContext) {
			expected, ok := fixtures.FlyteExpected(fixtures.NewestFlyteRelease, name)
			Expect(ok).To(BeTrue(), "no expected source for %s", name)
			published := s.env.PublishedJob(s.namespace, name).Obj()
			patched := s.env.PatchedJob(s.namespace, name).Obj()

			fix := admit(ctx, noAdmissionLabel, patched)
			Expect(fix.Err).To(BeEmpty())
			asPublished := admit(ctx, noAdmissionLabel, published)
			Expect(asPublished.Err).To(BeEmpty())

			for arm, source := range installs {
				By(arm)
				today := admit(ctx, arm, published)
				both := admit(ctx, arm, patched)
				Expect(today.Err).To(BeEmpty())
				Expect(both.Err).To(BeEmpty())

				// With the fix and the install, what the install stores today, but the source annotation.
				Expect(cmp.Diff(withoutSource(today.Stored), withoutSource(both.Stored))).To(BeEmpty(),
					"%s: Flyte as published (-) and with the fix (+)", arm)
				Expect(both.Warnings).To(Equal(today.Warnings), "%s: the warnings", arm)

				// The fix alone, against the install today.
				switch mutate.Source(source(expected)) {
				case mutate.SourceFlyteWorkerArgs:
					Expect(today.Stored.GetAnnotations()).To(HaveKeyWithValue(mutate.AnnotationWorkerCommandSource, string(mutate.SourceFlyteWorkerArgs)))
					Expect(cmp.Diff(withoutSource(today.Stored), fix.Stored)).To(BeEmpty(),
						"%s: Flyte as published through the install (-) and with the fix, alone (+), but the source annotation", arm)
					Expect(both.Stored.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource),
						"%s leaves the fix's job alone", arm)
				case mutate.SourceTaskCustom:
					// The annotation is the webhook's alone: the fix leaves the job as published.
					Expect(cmp.Diff(asPublished.Stored, fix.Stored)).To(BeEmpty(), "Flyte as published (-) and with the fix (+), both alone")
					Expect(cmp.Diff(withoutSource(today.Stored), fix.Stored)).NotTo(BeEmpty(), "%s: the annotation's command", arm)
				case mutate.SourceNone:
					Expect(cmp.Diff(today.Stored, fix.Stored)).To(BeEmpty(),
						"%s: Flyte as published through the install (-) and with the fix, alone (+)", arm)
				default:
					Fail("an expected source this spec does not know: " + source(expected))
				}
			}
		})
	}
}

// withoutSource returns a copy of job without the annotation mutate.AnnotationWorkerCommandSource.
func withoutSource(job *unstructured.Unstructured) *unstructured.Unstructured {
	out := job.DeepCopy()
	unstructured.RemoveNestedField(out.Object, "metadata", "annotations", mutate.AnnotationWorkerCommandSource)
	return out
}
