// Package specs holds the envtest specs that every MPIJob version must pass;
// the suites in test/envtest/v1 and test/envtest/v2beta1 run them.
package specs

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL
	. "github.com/onsi/gomega"    //nolint:revive // Gomega's DSL
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	. "github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework" //nolint:revive // the specs read as prose
)

// flytekitSpecCommand is the legacy task-config value worker_spec_command of flytekit's Horovod task.
const flytekitSpecCommand = "/usr/sbin/sshd -De -f /home/jobuser/.sshd_config"

// DescribeWebhook declares the specs that every MPIJob version must pass.
// env is called once the suite has started its Env.
func DescribeWebhook(env func() *Env) bool {
	return Describe("the worker command webhook", func() {
		var (
			e         *Env
			namespace string
		)

		BeforeEach(func(ctx SpecContext) {
			e = env()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "spec-"}}
			Expect(e.Client.Create(ctx, ns)).To(Succeed())
			namespace = ns.Name
			DeferCleanup(func(ctx context.Context) {
				Expect(client.IgnoreNotFound(e.Client.Delete(ctx, ns))).To(Succeed())
			})
		})

		// create stores job and returns it as the API server stored it.
		create := func(ctx context.Context, job *unstructured.Unstructured) *unstructured.Unstructured {
			GinkgoHelper()
			Expect(e.Client.Create(ctx, job)).To(Succeed())
			stored := &unstructured.Unstructured{}
			stored.SetGroupVersionKind(job.GroupVersionKind())
			Expect(e.Client.Get(ctx, client.ObjectKeyFromObject(job), stored)).To(Succeed())
			return stored
		}

		expectSSHDWorker := func(stored *unstructured.Unstructured, source mutate.Source) {
			GinkgoHelper()
			Expect(WorkerContainers(stored)).To(HaveExactElements(
				And(HaveKeyWithValue("name", "mpi"), HaveKeyWithValue("command", AnyList(SSHD)), Not(HaveKey("args"))),
			))
			Expect(stored.GetAnnotations()).To(HaveKeyWithValue(mutate.AnnotationWorkerCommandSource, string(source)))
		}

		expectUnchanged := func(stored, sent *unstructured.Unstructured) {
			GinkgoHelper()
			Expect(WorkerContainers(stored)).To(Equal(WorkerContainers(sent)))
			Expect(stored.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
		}

		It("makes the worker of flytekit's Horovod task run sshd, and leaves the launcher alone", func(ctx SpecContext) {
			job := e.FlyteJob(namespace).Label("workflow-name", "horovod-wf").
				Annotation(mutate.AnnotationTaskCustom, FlytekitCustom).Obj()
			stored := create(ctx, job)
			expectSSHDWorker(stored, mutate.SourceTaskCustom)
			Expect(Launcher(stored)).To(Equal(Launcher(job)))
		})

		It("reads the legacy worker-spec-command beside a legacy custom", func(ctx SpecContext) {
			stored := create(ctx, e.FlyteJob(namespace).
				Annotation(mutate.AnnotationTaskCustom, `{"numWorkers":2,"numLauncherReplicas":1,"slots":1}`).
				Annotation(mutate.AnnotationWorkerSpecCommand, flytekitSpecCommand).Obj())
			expectSSHDWorker(stored, mutate.SourceWorkerSpecCommand)
		})

		It("reads the annotation from the Worker's pod template", func(ctx SpecContext) {
			stored := create(ctx, e.FlyteJob(namespace).WorkerAnnotation(mutate.AnnotationTaskCustom, FlytekitCustom).Obj())
			expectSSHDWorker(stored, mutate.SourceTaskCustom)
		})

		It("leaves an unlabelled job alone, annotation or not", func(ctx SpecContext) {
			job := e.FlyteJob(namespace).WithoutLabels().Annotation(mutate.AnnotationTaskCustom, FlytekitCustom).Obj()
			expectUnchanged(create(ctx, job), job)
		})

		It("leaves a Flyte job without the annotation alone", func(ctx SpecContext) {
			job := e.FlyteJob(namespace).Obj()
			expectUnchanged(create(ctx, job), job)
		})

		It("rejects a malformed annotation, naming it, and stores nothing", func(ctx SpecContext) {
			job := e.FlyteJob(namespace).Annotation(mutate.AnnotationTaskCustom, `{"workerReplicas":{"command":"sshd"}}`).Obj()
			err := e.Client.Create(ctx, job)
			Expect(err).To(MatchError(And(
				ContainSubstring("denied the request"),
				ContainSubstring("mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings"),
			)))
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(job.GroupVersionKind())
			Expect(e.Client.List(ctx, list, client.InNamespace(namespace))).To(Succeed())
			Expect(list.Items).To(BeEmpty())
		})

		It("with --on-invalid=warn, stores a malformed job unchanged and warns the client", func(ctx SpecContext) {
			c, warnings, err := e.WarningClient()
			Expect(err).NotTo(HaveOccurred())
			job := e.FlyteJob(namespace).Label(OnInvalidWarnLabel, "true").
				Annotation(mutate.AnnotationTaskCustom, `{"workerReplicas":{"command":"sshd"}}`).Obj()
			Expect(c.Create(ctx, job)).To(Succeed())
			Expect(warnings.Messages()).To(ContainElement(
				ContainSubstring("mpi.flyte.org/task-custom: workerReplicas.command: expected a list of strings")))
			stored := &unstructured.Unstructured{}
			stored.SetGroupVersionKind(job.GroupVersionKind())
			Expect(e.Client.Get(ctx, client.ObjectKeyFromObject(job), stored)).To(Succeed())
			expectUnchanged(stored, e.FlyteJob(namespace).Obj())
		})

		It("answers a dry-run create with the mutated job, and stores nothing", func(ctx SpecContext) {
			job := e.FlyteJob(namespace).Annotation(mutate.AnnotationTaskCustom, FlytekitCustom).Obj()
			job.SetGenerateName("")
			job.SetName("dry-run")
			Expect(e.Client.Create(ctx, job, client.DryRunAll)).To(Succeed())
			expectSSHDWorker(job, mutate.SourceTaskCustom)
			err := e.Client.Get(ctx, client.ObjectKeyFromObject(job), job.DeepCopy())
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Get after a dry run: %v", err)
		})

		It("leaves a sidecar in the worker untouched", func(ctx SpecContext) {
			sidecar := map[string]any{
				"name": "log-shipper", "image": "fluent/fluent-bit:3.0",
				"command": []any{"/fluent-bit/bin/fluent-bit"}, "args": []any{"-c", "/etc/fluent-bit.conf"},
			}
			stored := create(ctx, e.FlyteJob(namespace).WorkerContainer(sidecar).
				Annotation(mutate.AnnotationTaskCustom, FlytekitCustom).Obj())
			containers := WorkerContainers(stored)
			Expect(containers).To(HaveLen(2))
			Expect(containers[0]).To(And(HaveKeyWithValue("command", AnyList(SSHD)), Not(HaveKey("args"))))
			Expect(containers[1]).To(Equal(sidecar))
		})

		It("keeps fields that the CRD has and the webhook's Go types lack", func(ctx SpecContext) {
			future := map[string]any{"nested": map[string]any{"list": []any{"a", "b"}, "flag": true, "text": "ü ∑ 😀"}}
			job := e.FlyteJob(namespace).Annotation(mutate.AnnotationTaskCustom, FlytekitCustom).
				Set(future, "spec", "futureField").Obj()
			containers := WorkerContainers(job)
			containers[0].(map[string]any)["futureContainerField"] = "keep me"
			Expect(unstructured.SetNestedSlice(job.Object, containers, WorkerContainersPath...)).To(Succeed())

			stored := create(ctx, job)
			Expect(stored.Object["spec"]).To(HaveKeyWithValue("futureField", future))
			Expect(WorkerContainers(stored)[0]).To(And(
				HaveKeyWithValue("futureContainerField", "keep me"), HaveKeyWithValue("command", AnyList(SSHD))))
		})

		It("does not mutate an update of an existing job", func(ctx SpecContext) {
			job := e.FlyteJob(namespace).Obj()
			stored := create(ctx, job)
			annotations := stored.GetAnnotations()
			annotations[mutate.AnnotationTaskCustom] = FlytekitCustom
			stored.SetAnnotations(annotations)
			Expect(e.Client.Update(ctx, stored)).To(Succeed())

			updated := &unstructured.Unstructured{}
			updated.SetGroupVersionKind(job.GroupVersionKind())
			Expect(e.Client.Get(ctx, client.ObjectKeyFromObject(stored), updated)).To(Succeed())
			Expect(updated.GetAnnotations()).To(HaveKey(mutate.AnnotationTaskCustom))
			expectUnchanged(updated, job)
		})

		It("fails closed: with its server down a Flyte job is rejected, not stored without its command; with Ignore it is stored unchanged", func(ctx SpecContext) {
			const label = "test.mpi.flyte.org/fail-closed"
			Expect(e.ServeLabelled(ctx, label, mutate.DefaultOptions())).To(Succeed())
			Expect(e.StopLabelled(label)).To(Succeed())
			job := e.FlyteJob(namespace).Label(label, "true").Annotation(mutate.AnnotationTaskCustom, FlytekitCustom).Obj()

			// failurePolicy: Fail, as config/default installs it.
			Expect(e.Webhook.Webhooks[0].FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
			Expect(e.Client.Create(ctx, job.DeepCopy())).To(MatchError(ContainSubstring("failed calling webhook")))
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(job.GroupVersionKind())
			Expect(e.Client.List(ctx, list, client.InNamespace(namespace))).To(Succeed())
			Expect(list.Items).To(BeEmpty())

			// failurePolicy: Ignore, as config/failure-policy-ignore installs it.
			hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
			Expect(e.Client.Get(ctx, client.ObjectKey{Name: e.LabelledConfiguration(label)}, hook)).To(Succeed())
			for i := range hook.Webhooks {
				hook.Webhooks[i].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}
			Expect(e.Client.Update(ctx, hook)).To(Succeed())
			created := job.DeepCopy()
			Eventually(func(g Gomega) { // until the API server has picked up the new policy
				created = job.DeepCopy()
				g.Expect(e.Client.Create(ctx, created)).To(Succeed())
			}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
			stored := &unstructured.Unstructured{}
			stored.SetGroupVersionKind(job.GroupVersionKind())
			Expect(e.Client.Get(ctx, client.ObjectKeyFromObject(created), stored)).To(Succeed())
			expectUnchanged(stored, job)
		})

		It("does not mutate a job in a namespace the namespaceSelector excludes", func(ctx SpecContext) {
			excluded := e.ExcludedNamespaces()
			Expect(excluded).To(ContainElement("kube-system"))
			for _, name := range excluded {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
				Expect(client.IgnoreAlreadyExists(e.Client.Create(ctx, ns))).To(Succeed())
				job := e.FlyteJob(name).Annotation(mutate.AnnotationTaskCustom, FlytekitCustom).Obj()
				stored := create(ctx, job)
				expectUnchanged(stored, job)
				Expect(e.Client.Delete(ctx, stored)).To(Succeed())
			}
		})
	})
}
