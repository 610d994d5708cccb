package operator

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
)

// CreateTimeout bounds the wait for the controller to create a job's
// objects, its own start included.
const CreateTimeout = 2 * time.Minute

// logTailLines is how much of the controller's log a failed spec prints.
const logTailLines = 60

// Cluster is what a suite runs against: an API server with the webhook, and
// one operator's controller.
type Cluster struct {
	// Env is the API server with the webhook.
	Env *framework.Env
	// Controller is the operator's controller, once started.
	Controller *Process
}

// StartController starts the operator's controller binary (see Binary),
// named name, with a kubeconfig for the Env's API server. args gets that
// kubeconfig's path and returns the controller's arguments; env is its
// environment besides KUBECONFIG.
func (c *Cluster) StartController(name, binary string, env []string, args func(kubeconfig string) []string) {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	kubeconfig, err := c.Env.WriteKubeConfig(dir)
	Expect(err).NotTo(HaveOccurred())
	c.Controller, err = Start(name, binary, kubeconfig, dir, env, args(kubeconfig)...)
	Expect(err).NotTo(HaveOccurred())
}

// Stop stops the controller, then the API server and the webhook: whatever
// of them started.
func (c *Cluster) Stop() {
	GinkgoHelper()
	if c.Controller != nil {
		Expect(c.Controller.Stop()).To(Succeed())
	}
	if c.Env != nil {
		Expect(c.Env.Stop()).To(Succeed())
	}
}

// Namespace creates a namespace for the running spec, and deletes it when
// the spec ends; a spec that failed first prints the end of the
// controller's log, where the reason a Pod never came usually is. Call it
// from a BeforeEach or the spec itself.
func (c *Cluster) Namespace(ctx context.Context) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	Expect(c.Env.Client.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		if CurrentSpecReport().Failed() && c.Controller != nil {
			fmt.Fprintf(GinkgoWriter, "%s's log ends with:\n%s\n", c.Controller.name, c.Controller.LogTail(logTailLines))
		}
		Expect(client.IgnoreNotFound(c.Env.Client.Delete(ctx, ns))).To(Succeed())
	})
	return ns.Name
}

// Unhooked moves job into a namespace that the webhook configuration's
// namespaceSelector excludes, kube-system, and deletes it when the spec
// ends: what the controller makes of it there is what it would make in a
// cluster without the webhook. It returns job.
func (c *Cluster) Unhooked(job *unstructured.Unstructured) *unstructured.Unstructured {
	GinkgoHelper()
	const kubeSystem = "kube-system" // the API server creates it at start
	Expect(c.Env.ExcludedNamespaces()).To(ContainElement(kubeSystem),
		"the webhook configuration no longer excludes %s: move the jobs without the webhook elsewhere", kubeSystem)
	job.SetNamespace(kubeSystem)
	DeferCleanup(func(ctx context.Context) {
		if job.GetName() != "" { // created
			Expect(client.IgnoreNotFound(c.Env.Client.Delete(ctx, job))).To(Succeed())
		}
	})
	return job
}

// Pods waits until the controller has created exactly count Pods in
// namespace that carry every one of labels, and returns them.
func (c *Cluster) Pods(ctx context.Context, namespace string, labels map[string]string, count int) []corev1.Pod {
	GinkgoHelper()
	var pods corev1.PodList
	c.Await(ctx, func(g Gomega) {
		g.Expect(c.Env.Client.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels(labels))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(count))
	})
	return pods.Items
}

// Object waits until the controller has created the object named key, and
// reads it into obj.
func (c *Cluster) Object(ctx context.Context, key client.ObjectKey, obj client.Object) {
	GinkgoHelper()
	c.Await(ctx, func(g Gomega) { g.Expect(c.Env.Client.Get(ctx, key, obj)).To(Succeed()) })
}

// Await waits, up to CreateTimeout, until check passes, for what the
// controller makes. It gives up at once, with the end of the controller's
// log, when the controller has exited: nothing it makes can come then.
func (c *Cluster) Await(ctx context.Context, check func(g Gomega)) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		if err := c.Controller.Exited(); err != nil {
			StopTrying(c.Controller.name + " is not running").Wrap(err).Now()
		}
		check(g)
	}).WithTimeout(CreateTimeout).Should(Succeed())
}
