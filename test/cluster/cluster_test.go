package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

const (
	// jobImage is the image Flyte's task names (testdata/flyte), which
	// hack/cluster/job-image.sh builds and make test-cluster imports into the node.
	jobImage = "ghcr.io/flyteorg/flytecookbook:kfmpi-horovod"
	// horovodCase is the case of hack/flyte-testdata whose task declares
	// Worker(command=["/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"]).
	horovodCase = "horovod-worker-command"
	// taskCPU is what the job's Pods ask for: Flyte's default, a CPU each,
	// leaves a launcher and two workers unschedulable on a node of two.
	taskCPU = "100m"
	// webhookNamespace is where the chart is installed, as users do, under the
	// restricted Pod Security Standard.
	webhookNamespace = "flyte-mpi-webhook"
	// release is the Helm release's name.
	release = "flyte-mpi-webhook"
	// webhookName is the webhook's name in its MutatingWebhookConfiguration,
	// which the API server's refusal names.
	webhookName = "mpijob-worker-command.mpi.flyte.org"
)

// Timeouts of what the node does: start a Pod from an imported image, run a
// job of three Pods to its end (the launcher's horovodrun gives the workers
// 120 s to answer over SSH).
const (
	podTimeout = 2 * time.Minute
	jobTimeout = 5 * time.Minute
	// unhookedWatch is how long a job without the webhook is watched not to succeed.
	unhookedWatch = 45 * time.Second
	poll          = time.Second
)

// jobLabels selects the Pods of the training-operator's replica of job.
func jobLabels(job *unstructured.Unstructured, replicaType string) client.MatchingLabels {
	return client.MatchingLabels{
		"training.kubeflow.org/job-name":     job.GetName(),
		"training.kubeflow.org/replica-type": replicaType,
	}
}

// condition returns the status of job's condition of type kind ("" if none), and its message.
func condition(ctx context.Context, g Gomega, job *unstructured.Unstructured, kind string) (string, string) {
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(job.GroupVersionKind())
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), got)).To(Succeed())
	conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
	for _, c := range conditions {
		c, _ := c.(map[string]any)
		if c["type"] == kind {
			return fmt.Sprint(c["status"]), fmt.Sprint(c["message"])
		}
	}
	return "", ""
}

// onlyJob returns the one MPIJob of namespace.
func onlyJob(ctx context.Context, namespace string) *unstructured.Unstructured {
	GinkgoHelper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(fixtures.MPIJob("v1"))
	Expect(k8sClient.List(ctx, list, client.InNamespace(namespace))).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	return &list.Items[0]
}

// launchFlyte runs Flyte's backend on the task of hack/flyte-testdata's case
// name, in namespace, and expects Flyte to report no error.
func launchFlyte(ctx context.Context, namespace, name string) {
	GinkgoHelper()
	out := run(ctx, 2*time.Minute, flyteBackend, "launch", "-kubeconfig", kubeconfig,
		"-namespace", namespace, "-case", name, "-cpu", taskCPU)
	var result struct {
		Phase       string          `json:"phase"`
		Error       json.RawMessage `json:"error"`
		HandleError json.RawMessage `json:"handleError"`
	}
	Expect(json.Unmarshal([]byte(out), &result)).To(Succeed(), out)
	Expect(result.HandleError).To(BeEmpty(), "Flyte's backend: %s", out)
	Expect(result.Error).To(BeEmpty(), "Flyte's backend: %s", out)
	fmt.Fprintf(GinkgoWriter, "Flyte reports for %s: %s", name, out)
}

// runningWorkers waits until every worker of job runs, and returns them.
func runningWorkers(ctx context.Context, job *unstructured.Unstructured, count int) []corev1.Pod {
	GinkgoHelper()
	var pods corev1.PodList
	Eventually(ctx, func(g Gomega) {
		g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(job.GetNamespace()), jobLabels(job, "worker"))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(count))
		g.Expect(pods.Items).To(HaveEach(HaveField("Status.Phase", corev1.PodRunning)))
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
	return pods.Items
}

// mpiContainer matches a Pod whose container "mpi" runs command with args.
func mpiContainer(command, args []string) OmegaMatcher {
	return HaveField("Spec.Containers", ContainElement(And(
		HaveField("Name", "mpi"), HaveField("Command", Equal(command)), HaveField("Args", Equal(args)))))
}

var _ = Describe("a single-node cluster", Ordered, func() {
	It("runs a Pod on its node", func(ctx SpecContext) {
		ns := namespace(ctx)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "hello", Image: jobImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"/bin/sh", "-c", "test -d /run/sshd && test -f /home/jobuser/.sshd_config"},
				}},
			},
		}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		Eventually(ctx, func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "%+v", pod.Status.ContainerStatuses)
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
	})

	It("installs the webhook with its Helm chart: both replicas Ready under Pod Security restricted", func(ctx SpecContext) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhookNamespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
		}}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		repository, tag, ok := strings.Cut(webhookImage, ":")
		Expect(ok).To(BeTrue(), "WEBHOOK_IMAGE %q is not REPOSITORY:TAG", webhookImage)
		run(ctx, 4*time.Minute, helmBinary, "install", release, chartDir, "--namespace", webhookNamespace,
			"--set", "mode=webhook", "--set", "image.repository="+repository, "--set", "image.tag="+tag,
			"--set", "image.pullPolicy=Never", "--wait", "--timeout", "3m")

		var deployments appsv1.DeploymentList
		Expect(k8sClient.List(ctx, &deployments, client.InNamespace(webhookNamespace))).To(Succeed())
		Expect(deployments.Items).To(HaveLen(1))
		deployment := deployments.Items[0]
		Expect(deployment.Spec.Replicas).To(Equal(ptr.To[int32](2)))
		Eventually(ctx, func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(webhookNamespace),
				client.MatchingLabels(deployment.Spec.Selector.MatchLabels))).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(2))
			for _, pod := range pods.Items {
				g.Expect(meta.IsStatusConditionTrue(podConditions(pod), string(corev1.PodReady))).To(BeTrue(), pod.Name)
				g.Expect(pod.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem).To(Equal(ptr.To(true)))
				g.Expect(pod.Spec.Containers[0].Resources.Limits.Memory().IsZero()).To(BeFalse())
			}
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
	})

	DescribeTable("runs Flyte's Horovod job to Succeeded: the webhook makes its workers run sshd",
		func(ctx SpecContext, name string) {
			ns := namespace(ctx)
			launchFlyte(ctx, ns, name)
			job := onlyJob(ctx, ns)
			Expect(runningWorkers(ctx, job, 2)).To(HaveEach(mpiContainer(fixtures.SSHD, nil)))
			awaitSucceeded(ctx, job)
		},
		Entry("the task declares Worker(command=sshd ...)", horovodCase),
		Entry("the task declares nothing: the Horovod rule", fixtures.HorovodNoWorkerCommand),
	)

	It("never succeeds with the same job without the webhook: its workers run `sleep 365d`", func(ctx SpecContext) {
		ns := namespace(ctx)
		job, err := fixtures.FlyteJob("v1", horovodCase)
		Expect(err).NotTo(HaveOccurred())
		// Without Flyte's labels, the webhook configuration's objectSelector leaves the job alone.
		labels := job.GetLabels()
		delete(labels, "execution-id")
		delete(labels, "task-name")
		job.SetLabels(labels)
		job.SetNamespace(ns)
		job.SetOwnerReferences(nil)
		for _, replica := range []string{"Launcher", "Worker"} {
			path := []string{"spec", "mpiReplicaSpecs", replica, "template", "spec", "containers"}
			containers, _, err := unstructured.NestedSlice(job.Object, path...)
			Expect(err).NotTo(HaveOccurred())
			resources := map[string]any{"cpu": taskCPU, "memory": "1Gi"}
			containers[0].(map[string]any)["resources"] = map[string]any{"requests": resources, "limits": resources}
			Expect(unstructured.SetNestedSlice(job.Object, containers, path...)).To(Succeed())
		}
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		Expect(runningWorkers(ctx, job, 2)).To(HaveEach(mpiContainer([]string{"sleep"}, []string{"365d"})))
		Consistently(ctx, func(g Gomega) {
			succeeded, _ := condition(ctx, g, job, "Succeeded")
			g.Expect(succeeded).NotTo(Equal("True"))
		}).WithTimeout(unhookedWatch).WithPolling(2 * poll).Should(Succeed())
	})

	It("leaves a plain MPI task's job as Flyte made it", func(ctx SpecContext) {
		ns := namespace(ctx)
		launchFlyte(ctx, ns, fixtures.MPIPlain)
		want, err := fixtures.FlyteJob("v1", fixtures.MPIPlain)
		Expect(err).NotTo(HaveOccurred())
		got := onlyJob(ctx, ns)
		for _, replica := range []string{"Launcher", "Worker"} {
			path := []string{"spec", "mpiReplicaSpecs", replica, "template", "spec", "containers"}
			wantContainers, _, _ := unstructured.NestedSlice(want.Object, path...)
			gotContainers, _, _ := unstructured.NestedSlice(got.Object, path...)
			Expect(gotContainers).To(HaveLen(len(wantContainers)))
			for i := range wantContainers {
				for _, field := range []string{"command", "args"} {
					Expect(cmp.Diff(wantContainers[i].(map[string]any)[field], gotContainers[i].(map[string]any)[field])).
						To(BeEmpty(), "%s container %d's %s (-want +got)", replica, i, field)
				}
			}
		}
	})

	It("admits every job with its worker command through a rollout, a deleted webhook Pod and a kubelet restart", func(ctx SpecContext) {
		ns := namespace(ctx)
		repository, _, _ := strings.Cut(webhookImage, ":")
		rollout := repository + ":rollout"
		run(ctx, time.Minute, "ctr", "-n", "k8s.io", "images", "tag", "--force", webhookImage, rollout)
		jobs := startCreating(ns)
		DeferCleanup(jobs.finish)

		By("helm upgrade to a new image")
		run(ctx, 4*time.Minute, helmBinary, "upgrade", release, chartDir, "--namespace", webhookNamespace,
			"--reuse-values", "--set", "image.tag=rollout", "--wait", "--timeout", "3m")
		awaitBothReplicas(ctx)
		Expect(webhookDeployment(ctx).Spec.Template.Spec.Containers[0].Image).To(Equal(rollout))

		By("deleting one webhook Pod")
		Eventually(ctx, func(g Gomega) { g.Expect(webhookPods(ctx, g)).To(HaveLen(2)) }).Should(Succeed())
		var pods []corev1.Pod
		Eventually(ctx, func(g Gomega) { pods = webhookPods(ctx, g) }).Should(Succeed())
		Expect(k8sClient.Delete(ctx, &pods[0])).To(Succeed())
		awaitBothReplicas(ctx)

		By("restarting the kubelet")
		restartKubelet(ctx)
		awaitBothReplicas(ctx)

		expectAllAdmittedWithCommand(jobs.finish())
	})

	It("refuses Flyte's jobs, naming the webhook, while no replica runs, and admits them once one is Ready", func(ctx SpecContext) {
		ns := namespace(ctx)
		scale(ctx, 0)
		// Gone, not only terminating: a terminating replica keeps serving through
		// its drain (--shutdown-drain), and the API server may still call it.
		Eventually(ctx, func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(webhookNamespace),
				client.MatchingLabels(webhookDeployment(ctx).Spec.Selector.MatchLabels))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
		job := suspendedFlyteJob(ns, "refused")
		err := k8sClient.Create(ctx, job)
		Expect(err).To(MatchError(ContainSubstring(webhookName)))

		scale(ctx, replicas)
		Eventually(ctx, func(g Gomega) {
			ready := slices.ContainsFunc(webhookPods(ctx, g), podReady)
			g.Expect(ready).To(BeTrue())
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
		Eventually(ctx, func() error {
			return k8sClient.Create(ctx, suspendedFlyteJob(ns, "admitted"))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
		awaitBothReplicas(ctx)
	})

	It("in policy mode, with no webhook Pod, runs Flyte's Horovod job to Succeeded", func(ctx SpecContext) {
		run(ctx, 4*time.Minute, helmBinary, "upgrade", release, chartDir, "--namespace", webhookNamespace,
			"--reuse-values", "--set", "mode=policy", "--wait", "--timeout", "3m")
		Eventually(ctx, func(g Gomega) {
			var deployments appsv1.DeploymentList
			g.Expect(k8sClient.List(ctx, &deployments, client.InNamespace(webhookNamespace))).To(Succeed())
			g.Expect(deployments.Items).To(BeEmpty())
			var pods corev1.PodList
			g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(webhookNamespace))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())

		ns := namespace(ctx)
		// The API server takes a moment to load a new MutatingAdmissionPolicy:
		// until then, Flyte's job would be stored unchanged.
		Eventually(ctx, func(g Gomega) {
			job := suspendedFlyteJob(ns, fmt.Sprintf("probe-%d", time.Now().UnixNano()))
			g.Expect(k8sClient.Create(ctx, job)).To(Succeed())
			command, _, _ := unstructured.NestedStringSlice(workerContainer(job), "command")
			g.Expect(command).To(Equal(fixtures.SSHD))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
		jobNamespace := namespace(ctx)
		launchFlyte(ctx, jobNamespace, horovodCase)
		job := onlyJob(ctx, jobNamespace)
		Expect(runningWorkers(ctx, job, 2)).To(HaveEach(mpiContainer(fixtures.SSHD, nil)))
		awaitSucceeded(ctx, job)
	})
})

// awaitSucceeded waits until job's Succeeded condition is True, and gives up
// at once when its Failed condition is.
func awaitSucceeded(ctx context.Context, job *unstructured.Unstructured) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		failed, message := condition(ctx, g, job, "Failed")
		if failed == "True" {
			StopTrying("the MPIJob failed: " + message).Now()
		}
		succeeded, _ := condition(ctx, g, job, "Succeeded")
		g.Expect(succeeded).To(Equal("True"))
	}).WithTimeout(jobTimeout).WithPolling(2 * poll).Should(Succeed())
}

// suspendedFlyteJob returns testdata/flyte's horovodCase job, named name in
// namespace, suspended so that the training-operator starts no Pods for it.
func suspendedFlyteJob(namespace, name string) *unstructured.Unstructured {
	GinkgoHelper()
	job, err := fixtures.FlyteJob("v1", horovodCase)
	Expect(err).NotTo(HaveOccurred())
	job.SetNamespace(namespace)
	job.SetName(name)
	job.SetOwnerReferences(nil)
	Expect(unstructured.SetNestedField(job.Object, true, "spec", "runPolicy", "suspend")).To(Succeed())
	return job
}

// workerContainer returns the first container of job's Worker.
func workerContainer(job *unstructured.Unstructured) map[string]any {
	containers, _, _ := unstructured.NestedSlice(job.Object, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers")
	if len(containers) == 0 {
		return nil
	}
	container, _ := containers[0].(map[string]any)
	return container
}

// scale sets the webhook Deployment's replicas.
func scale(ctx context.Context, replicas int32) {
	GinkgoHelper()
	deployment := webhookDeployment(ctx)
	patch := client.MergeFrom(deployment.DeepCopy())
	deployment.Spec.Replicas = &replicas
	Expect(k8sClient.Patch(ctx, deployment, patch)).To(Succeed())
}

// podConditions returns pod's conditions as metav1.Conditions, for meta.IsStatusConditionTrue.
func podConditions(pod corev1.Pod) []metav1.Condition {
	conditions := make([]metav1.Condition, 0, len(pod.Status.Conditions))
	for _, c := range pod.Status.Conditions {
		conditions = append(conditions, metav1.Condition{Type: string(c.Type), Status: metav1.ConditionStatus(c.Status)})
	}
	return conditions
}
