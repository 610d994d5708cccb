package envtest_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// describeAnnotations declares the specs of the annotations a user adds to a
// Flyte job, and of the webhook's configuration: on the job Flyte builds for
// a Horovod task that declares no worker command, whose Worker carries a copy
// of the Launcher's args.
func describeAnnotations(s *spec) bool {
	return Describe("the annotations", func() {
		// undeclared is the job of a task that declares no worker command.
		undeclared := func() *framework.JobBuilder { return s.job(fixtures.HorovodNoWorkerCommand) }

		It("makes the worker of flytekit's Horovod task run its declared command, and leaves the launcher alone", func(ctx SpecContext) {
			job := undeclared().Label("workflow-name", "horovod-wf").
				Annotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom).Obj()
			stored := s.create(ctx, job)
			expectWorker(stored, fixtures.WorkerCommand, mutate.SourceTaskCustom)
			Expect(framework.Launcher(stored)).To(Equal(framework.Launcher(job)))
		})

		It("reads the legacy worker-spec-command beside a legacy custom", func(ctx SpecContext) {
			stored := s.create(ctx, undeclared().
				Annotation(mutate.AnnotationTaskCustom, fixtures.LegacyCustom).
				Annotation(mutate.AnnotationWorkerSpecCommand, fixtures.WorkerCommandLine).Obj())
			expectWorker(stored, fixtures.WorkerCommand, mutate.SourceWorkerSpecCommand)
		})

		It("reads the annotation from the Worker's pod template", func(ctx SpecContext) {
			stored := s.create(ctx, undeclared().WorkerAnnotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom).Obj())
			expectWorker(stored, fixtures.WorkerCommand, mutate.SourceTaskCustom)
		})

		It("leaves an unlabelled job alone, annotation or not", func(ctx SpecContext) {
			job := undeclared().WithoutLabels().Annotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom).Obj()
			expectUnchanged(s.create(ctx, job), job)
		})

		It("leaves a Flyte job without the annotation alone", func(ctx SpecContext) {
			job := undeclared().Obj()
			expectUnchanged(s.create(ctx, job), job)
		})

		// 422 Invalid, which flytepropeller fails at once (BadTaskFormat); the
		// API server passes the webhook's code, reason and causes through.
		DescribeTable("rejects a malformed annotation as Invalid, naming it, and stores nothing",
			func(ctx SpecContext, onWorker bool, field string) {
				b := undeclared()
				if onWorker {
					b.WorkerAnnotation(mutate.AnnotationTaskCustom, `{"workerReplicas":{"command":"sshd"}}`)
				} else {
					b.Annotation(mutate.AnnotationTaskCustom, `{"workerReplicas":{"command":"sshd"}}`)
				}
				job := b.Obj()
				err := s.env.Client.Create(ctx, job)
				Expect(err).To(MatchError(And(
					ContainSubstring("denied the request"),
					ContainSubstring("mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings"),
				)))
				Expect(apierrors.IsInvalid(err)).To(BeTrue(), "not Invalid: %#v", err)
				status, ok := err.(apierrors.APIStatus)
				Expect(ok).To(BeTrue(), "not an API status: %#v", err)
				Expect(status.Status().Code).To(BeEquivalentTo(422))
				Expect(status.Status().Details).To(And(
					HaveField("Kind", "MPIJob"),
					HaveField("Causes", HaveExactElements(metav1.StatusCause{
						Type: metav1.CauseTypeFieldValueInvalid, Field: field,
						Message: "workerReplicas.command: expected a list of strings",
					})),
				))
				s.expectNoJobs(ctx, job)
			},
			Entry("on the MPIJob", false, "metadata.annotations[mpi.flyte.org/task-custom]"),
			Entry("on the Worker's pod template", true,
				"spec.mpiReplicaSpecs.Worker.template.metadata.annotations[mpi.flyte.org/task-custom]"),
		)

		It("with --on-invalid=warn, stores a malformed job unchanged and warns the client", func(ctx SpecContext) {
			c, warnings, err := s.env.WarningClient()
			Expect(err).NotTo(HaveOccurred())
			job := undeclared().Label(framework.OnInvalidWarnLabel, "true").
				Annotation(mutate.AnnotationTaskCustom, `{"workerReplicas":{"command":"sshd"}}`).Obj()
			Expect(c.Create(ctx, job)).To(Succeed())
			Expect(warnings.Messages()).To(ContainElement(
				ContainSubstring("mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings")))
			expectUnchanged(s.get(ctx, job), undeclared().Obj())
		})

		It("answers a dry-run create with the mutated job, and stores nothing", func(ctx SpecContext) {
			job := undeclared().Annotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom).Obj()
			job.SetGenerateName("")
			job.SetName("dry-run")
			Expect(s.env.Client.Create(ctx, job, client.DryRunAll)).To(Succeed())
			expectWorker(job, fixtures.WorkerCommand, mutate.SourceTaskCustom)
			err := s.env.Client.Get(ctx, client.ObjectKeyFromObject(job), job.DeepCopy())
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Get after a dry run: %v", err)
		})

		It("leaves a sidecar in the worker untouched", func(ctx SpecContext) {
			sidecar := map[string]any{
				"name": "log-shipper", "image": "fluent/fluent-bit:3.0",
				"command": []any{"/fluent-bit/bin/fluent-bit"}, "args": []any{"-c", "/etc/fluent-bit.conf"},
			}
			stored := s.create(ctx, undeclared().WorkerContainer(sidecar).
				Annotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom).Obj())
			containers := framework.WorkerContainers(stored)
			Expect(containers).To(HaveLen(2))
			Expect(containers[0]).To(And(HaveKeyWithValue("command", framework.AnyList(fixtures.WorkerCommand)), Not(HaveKey("args"))))
			Expect(containers[1]).To(Equal(sidecar))
		})

		It("keeps fields that the CRD has and the webhook's Go types lack", func(ctx SpecContext) {
			future := map[string]any{"nested": map[string]any{"list": []any{"a", "b"}, "flag": true, "text": "ü ∑ 😀"}}
			job := undeclared().Annotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom).
				Set(future, "spec", "futureField").Obj()
			containers := framework.WorkerContainers(job)
			containers[0].(map[string]any)["futureContainerField"] = "keep me"
			Expect(unstructured.SetNestedSlice(job.Object, containers, framework.WorkerContainersPath...)).To(Succeed())

			stored := s.create(ctx, job)
			Expect(stored.Object["spec"]).To(HaveKeyWithValue("futureField", future))
			Expect(framework.WorkerContainers(stored)[0]).To(And(
				HaveKeyWithValue("futureContainerField", "keep me"), HaveKeyWithValue("command", framework.AnyList(fixtures.WorkerCommand))))
		})

		It("does not mutate an update of an existing job", func(ctx SpecContext) {
			job := undeclared().Obj()
			stored := s.create(ctx, job)
			annotations := stored.GetAnnotations()
			annotations[mutate.AnnotationTaskCustom] = fixtures.FlytekitCustom
			stored.SetAnnotations(annotations)
			Expect(s.env.Client.Update(ctx, stored)).To(Succeed())

			updated := s.get(ctx, stored)
			Expect(updated.GetAnnotations()).To(HaveKey(mutate.AnnotationTaskCustom))
			expectUnchanged(updated, job)
		})

		It("fails closed: with its server down a Flyte job is rejected, not stored without its command; with Ignore it is stored unchanged", func(ctx SpecContext) {
			const label = "test.mpi.flyte.org/fail-closed"
			Expect(s.env.ServeLabelled(ctx, label, mutate.DefaultOptions())).To(Succeed())
			Expect(s.env.StopLabelled(label)).To(Succeed())
			job := undeclared().Label(label, "true").Annotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom).Obj()

			// failurePolicy: Fail, as config/default installs it.
			Expect(s.env.Webhook.Webhooks[0].FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
			Expect(s.env.Client.Create(ctx, job.DeepCopy())).To(MatchError(ContainSubstring("failed calling webhook")))
			s.expectNoJobs(ctx, job)

			// failurePolicy: Ignore, as config/failure-policy-ignore installs it.
			hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
			Expect(s.env.Client.Get(ctx, client.ObjectKey{Name: s.env.LabelledConfiguration(label)}, hook)).To(Succeed())
			for i := range hook.Webhooks {
				hook.Webhooks[i].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}
			Expect(s.env.Client.Update(ctx, hook)).To(Succeed())
			created := job.DeepCopy()
			Eventually(func(g Gomega) { // until the API server has picked up the new policy
				created = job.DeepCopy()
				g.Expect(s.env.Client.Create(ctx, created)).To(Succeed())
			}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
			expectUnchanged(s.get(ctx, created), job)
		})

		It("does not mutate a job in a namespace the namespaceSelector excludes", func(ctx SpecContext) {
			excluded := s.env.ExcludedNamespaces()
			Expect(excluded).To(ContainElement("kube-system"))
			for _, name := range excluded {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
				Expect(client.IgnoreAlreadyExists(s.env.Client.Create(ctx, ns))).To(Succeed())
				job := s.env.Job(name, fixtures.HorovodNoWorkerCommand).Annotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom).Obj()
				stored := s.create(ctx, job)
				expectUnchanged(stored, job)
				Expect(s.env.Client.Delete(ctx, stored)).To(Succeed())
			}
		})
	})
}
