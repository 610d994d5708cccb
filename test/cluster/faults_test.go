package cluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// creationInterval is how often the fault specs create a Flyte MPIJob.
const creationInterval = 100 * time.Millisecond

// creation is the outcome of one MPIJob creation.
type creation struct {
	name string
	err  error
	// workerCommand is the stored job's Worker command.
	workerCommand []string
}

// creator creates a Flyte-built MPIJob (testdata/flyte's horovodCase) in a
// namespace every creationInterval until stopped, and keeps every outcome.
// The jobs are suspended (runPolicy.suspend), so that the training-operator
// starts no Pods for them: the specs are about admission.
type creator struct {
	namespace string
	stop      context.CancelFunc
	done      sync.WaitGroup
	mu        sync.Mutex
	outcomes  []creation
}

// startCreating starts a creator in namespace.
func startCreating(namespace string) *creator {
	ctx, cancel := context.WithCancel(context.Background())
	c := &creator{namespace: namespace, stop: cancel}
	template, err := fixtures.FlyteJob("v1", horovodCase)
	Expect(err).NotTo(HaveOccurred())
	template.SetNamespace(namespace)
	template.SetOwnerReferences(nil)
	Expect(unstructured.SetNestedField(template.Object, true, "spec", "runPolicy", "suspend")).To(Succeed())
	c.done.Add(1)
	go func() {
		defer GinkgoRecover()
		defer c.done.Done()
		ticker := time.NewTicker(creationInterval)
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			job := template.DeepCopy()
			job.SetName(fmt.Sprintf("fault-%05d", i))
			c.done.Add(1)
			go func() {
				defer c.done.Done()
				c.create(job)
			}()
		}
	}()
	return c
}

// create creates job and records the outcome.
func (c *creator) create(job *unstructured.Unstructured) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	outcome := creation{name: job.GetName(), err: k8sClient.Create(ctx, job)}
	if outcome.err == nil {
		containers, _, _ := unstructured.NestedSlice(job.Object, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers")
		if len(containers) > 0 {
			command, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "command")
			outcome.workerCommand = command
		}
	}
	c.mu.Lock()
	c.outcomes = append(c.outcomes, outcome)
	c.mu.Unlock()
}

// created returns the outcomes so far, and keeps creating.
func (c *creator) created() []creation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.outcomes)
}

// finish stops the creator and returns every outcome.
func (c *creator) finish() []creation {
	c.stop()
	c.done.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.outcomes)
}

// expectAllAdmittedWithCommand checks that every creation succeeded, and
// that every stored job runs the declared worker command.
func expectAllAdmittedWithCommand(outcomes []creation) {
	GinkgoHelper()
	Expect(outcomes).NotTo(BeEmpty())
	var refused, withoutCommand []string
	for _, o := range outcomes {
		switch {
		case o.err != nil:
			refused = append(refused, fmt.Sprintf("%s: %v", o.name, o.err))
		case !slices.Equal(o.workerCommand, fixtures.SSHD):
			withoutCommand = append(withoutCommand, fmt.Sprintf("%s: %q", o.name, o.workerCommand))
		}
	}
	fmt.Fprintf(GinkgoWriter, "%d creations, %d refused, %d without the worker command\n",
		len(outcomes), len(refused), len(withoutCommand))
	Expect(refused).To(BeEmpty(), "creations refused")
	Expect(withoutCommand).To(BeEmpty(), "jobs admitted without their worker command")
}

// webhookDeployment returns the chart's Deployment.
func webhookDeployment(ctx context.Context) *appsv1.Deployment {
	GinkgoHelper()
	var deployments appsv1.DeploymentList
	Expect(k8sClient.List(ctx, &deployments, client.InNamespace(webhookNamespace))).To(Succeed())
	Expect(deployments.Items).To(HaveLen(1))
	return &deployments.Items[0]
}

// webhookPods returns the webhook's Pods that are not terminating.
func webhookPods(ctx context.Context, g Gomega) []corev1.Pod {
	deployment := webhookDeployment(ctx)
	var pods corev1.PodList
	g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(webhookNamespace),
		client.MatchingLabels(deployment.Spec.Selector.MatchLabels))).To(Succeed())
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// replicas is the chart's default number of webhook replicas.
const replicas = 2

// awaitBothReplicas waits until the Deployment has rolled out and both its Pods are Ready.
func awaitBothReplicas(ctx context.Context) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		deployment := webhookDeployment(ctx)
		g.Expect(deployment.Status.ObservedGeneration).To(Equal(deployment.Generation))
		g.Expect(deployment.Status.UpdatedReplicas).To(BeEquivalentTo(replicas))
		g.Expect(deployment.Status.ReadyReplicas).To(BeEquivalentTo(replicas))
		ready := 0
		for _, pod := range webhookPods(ctx, g) {
			if podReady(pod) {
				ready++
			}
		}
		g.Expect(ready).To(Equal(replicas))
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// podReady reports whether pod's Ready condition is True.
func podReady(pod corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// restartKubelet stops the node's kubelet and starts it again, with test/cluster/cluster.sh.
func restartKubelet(ctx context.Context) {
	GinkgoHelper()
	script := os.Getenv("CLUSTER_SCRIPT")
	Expect(script).NotTo(BeEmpty(), "CLUSTER_SCRIPT is not set: run the suite with `make test-cluster`")
	run(ctx, 3*time.Minute, script, "restart-kubelet")
}
