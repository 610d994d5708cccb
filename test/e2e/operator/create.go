package operator

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// Sidecar is a container that a task's pod template lists before the
// task's own, as a log shipper's would be: Flyte keeps that order in both
// replicas. It has no command, as sidecars usually rely on their image's.
var Sidecar = corev1.Container{Name: "log-shipper", Image: "fluent/fluent-bit:3.0"}

// Create creates job and returns it as sent; job becomes what the API
// server stored, after the webhook.
func (c *Cluster) Create(ctx context.Context, job *unstructured.Unstructured) (sent *unstructured.Unstructured) {
	GinkgoHelper()
	sent = job.DeepCopy()
	Expect(c.Env.Client.Create(ctx, job)).To(Succeed())
	return sent
}

// CreateDeclared creates the Flyte-built job name (testdata/flyte), whose
// task declares its worker command, sshd, and that carries no annotation:
// in namespace when hooked, else where the webhook does not act (Unhooked).
// It checks that Flyte wrote the declared command into the Worker's args,
// and that the webhook took it (source flyte-worker-args) or, unhooked, was
// never asked. It returns the job as sent and as the API server stored it.
func (c *Cluster) CreateDeclared(ctx context.Context, namespace, name string, hooked bool) (sent, stored *unstructured.Unstructured) {
	GinkgoHelper()
	stored = c.Env.Job(namespace, name).Obj()
	if !hooked {
		stored = c.Unhooked(stored)
	}
	Expect(Args(stored, "Worker")).To(Equal(fixtures.SSHD), "the declared worker command, as Flyte writes it")
	sent = c.Create(ctx, stored)
	if hooked {
		Expect(stored.GetAnnotations()).To(HaveKeyWithValue(mutate.AnnotationWorkerCommandSource, string(mutate.SourceFlyteWorkerArgs)))
	} else {
		Expect(stored.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
	}
	return sent, stored
}

// CreateWithSidecar creates in namespace the Flyte-built job whose pod
// template carries the task-custom annotation, with Sidecar before the mpi
// container in both replicas, as that pod template would list it. It checks
// that the webhook warned that the container named mpi is not the first,
// and returns the job as sent and as the API server stored it.
func (c *Cluster) CreateWithSidecar(ctx context.Context, namespace string) (sent, stored *unstructured.Unstructured) {
	GinkgoHelper()
	stored = WithFirstContainer(c.Env.Job(namespace, fixtures.HorovodPodTemplateAnnotation).Obj(), Sidecar)
	sent = stored.DeepCopy()
	warningClient, warnings, err := c.Env.WarningClient()
	Expect(err).NotTo(HaveOccurred())
	Expect(warningClient.Create(ctx, stored)).To(Succeed())
	Expect(warnings.Messages()).To(ContainElement(ContainSubstring(
		`spec.mpiReplicaSpecs.Worker.template.spec.containers[1]: is named "mpi"`)))
	return sent, stored
}
