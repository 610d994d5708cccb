// Package envtest_test runs the webhook against a real kube-apiserver and
// etcd, with the webhook configuration config/default installs, once per
// MPIJob version: kubeflow.org/v1 (training-operator) and v2beta1
// (mpi-operator). Both CRDs are named mpijobs.kubeflow.org, so each version
// gets its own API server, started before its specs and stopped after them.
package envtest_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
)

// versions are the MPIJob versions every spec runs against.
var versions = []string{"v1", "v2beta1"}

func TestEnvtest(t *testing.T) {
	RegisterFailHandler(Fail)
	// The webhook's log, as the binary writes it, shown with a spec that fails.
	logf.SetLogger(GinkgoLogr)
	RunSpecs(t, "envtest: kubeflow.org/v1 and v2beta1, one API server each")
}

// spec is what a spec gets: the Env of the version under test, and a
// namespace of its own.
type spec struct {
	env *framework.Env
	// version is the MPIJob version under test, known as the specs are declared.
	version   string
	namespace string
}

// forEachVersion declares the specs that body declares once per MPIJob
// version, in an ordered container that starts that version's Env before
// them and stops it after: one API server at a time. A failed spec does not
// skip the others (ContinueOnFailure). Each spec gets a namespace of its own.
// `-ginkgo.label-filter=v1` runs one version.
func forEachVersion(body func(s *spec)) bool {
	for _, version := range versions {
		Describe("kubeflow.org/"+version, Ordered, ContinueOnFailure, Label(version), func() {
			s := &spec{version: version}
			BeforeAll(func(ctx SpecContext) {
				var err error
				s.env, err = framework.Start(ctx, version)
				Expect(err).NotTo(HaveOccurred())
			}, NodeTimeout(framework.StartTimeout))
			AfterAll(func() {
				if s.env != nil {
					Expect(s.env.Stop()).To(Succeed())
				}
			})
			var ns *corev1.Namespace
			BeforeEach(func(ctx SpecContext) {
				ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "spec-"}}
				Expect(s.env.Client.Create(ctx, ns)).To(Succeed())
				s.namespace = ns.Name
			})
			// AfterEach, not DeferCleanup: the last spec's cleanup would run after AfterAll stopped the API server.
			AfterEach(func(ctx SpecContext) {
				if ns.Name != "" {
					Expect(client.IgnoreNotFound(s.env.Client.Delete(ctx, ns))).To(Succeed())
				}
			})
			body(s)
		})
	}
	return true
}

var _ = forEachVersion(func(s *spec) {
	describeAnnotations(s)
	describeFlyteJobs(s)
	describeInstall(s)
	describePolicy(s)
	describeClientAuth(s)
	describeHooks(s)
	describeOwnCertificates(s)
})

// job starts from the Flyte-built job name of the version under test, in
// the spec's namespace.
func (s *spec) job(name string) *framework.JobBuilder { return s.env.Job(s.namespace, name) }

// create stores job and returns it as the API server stored it.
func (s *spec) create(ctx context.Context, job *unstructured.Unstructured) *unstructured.Unstructured {
	GinkgoHelper()
	Expect(s.env.Client.Create(ctx, job)).To(Succeed())
	return s.get(ctx, job)
}

// get returns job as the API server stored it.
func (s *spec) get(ctx context.Context, job *unstructured.Unstructured) *unstructured.Unstructured {
	GinkgoHelper()
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(job.GroupVersionKind())
	Expect(s.env.Client.Get(ctx, client.ObjectKeyFromObject(job), stored)).To(Succeed())
	return stored
}

// expectNoJobs checks that the spec's namespace holds no MPIJob.
func (s *spec) expectNoJobs(ctx context.Context, job *unstructured.Unstructured) {
	GinkgoHelper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(job.GroupVersionKind())
	Expect(s.env.Client.List(ctx, list, client.InNamespace(s.namespace))).To(Succeed())
	Expect(list.Items).To(BeEmpty())
}

// expectWorker checks that the worker's one container, mpi, runs command as
// its command, and that the source annotation says where it came from.
func expectWorker(stored *unstructured.Unstructured, command []string, source mutate.Source) {
	GinkgoHelper()
	Expect(framework.WorkerContainers(stored)).To(HaveExactElements(
		And(HaveKeyWithValue("name", "mpi"), HaveKeyWithValue("command", framework.AnyList(command)), Not(HaveKey("args"))),
	))
	Expect(stored.GetAnnotations()).To(HaveKeyWithValue(mutate.AnnotationWorkerCommandSource, string(source)))
}

// expectUnchanged checks that the worker's containers are as sent, and that
// no source annotation was added.
func expectUnchanged(stored, sent *unstructured.Unstructured) {
	GinkgoHelper()
	Expect(framework.WorkerContainers(stored)).To(Equal(framework.WorkerContainers(sent)))
	Expect(stored.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
}
