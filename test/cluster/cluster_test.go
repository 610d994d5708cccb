package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
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

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

const (
	// jobImage is the image Flyte's task names (testdata/flyte), which
	// hack/cluster/job-image.sh builds and make test-cluster imports into the
	// node: Debian's Open MPI and mpi4py, the task's code
	// (hack/cluster/job/task.py), a horovodrun stand-in, and sshd.
	jobImage = "ghcr.io/flyteorg/flytecookbook:kfmpi-horovod"
	// horovodCase is the case of hack/flyte-testdata whose task declares
	// Worker(command=["/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"]).
	horovodCase = fixtures.HorovodWorkerCommand
	// taskCPU is what the job's Pods ask for: Flyte's default, a CPU each,
	// leaves a launcher and two workers unschedulable on a node of two.
	taskCPU = "100m"
	// workerService is the task's environment that makes its ranks check,
	// each in its worker, that the sshd the task declares as its worker
	// command answers there (hack/cluster/job/task.py).
	workerService = "WORKER_SERVICE=127.0.0.1:" + sshdPort
	// webhookNamespace is where the README installs the chart, and where the
	// suite runs it under the restricted Pod Security Standard.
	webhookNamespace = "flyte-mpi-webhook-system"
	// release is the Helm release's name.
	release = "flyte-mpi-webhook"
	// webhookName is the webhook's name in its MutatingWebhookConfiguration,
	// which the API server's refusal names.
	webhookName = "mpijob-worker-command.mpi.flyte.org"
	// nodeIP is the node's address, and podCIDR the Pods' network (test/cluster/cluster.sh).
	nodeIP, podCIDR = "10.217.0.1", "10.218.0.0/24"
)

// Timeouts of what the node does: start a Pod from an imported image, run a
// job of three Pods to its end (a launcher's horovodrun gives the workers 120 s
// to be listed by the operator's host discovery script).
const (
	podTimeout = 2 * time.Minute
	jobTimeout = 5 * time.Minute
	poll       = time.Second
)

// task is a Flyte task the suite runs: a case of hack/flyte-testdata, with
// what launch adds to it as flytekit would serialize it.
type task struct {
	// name says what the task is, for the spec's output.
	name string
	// flyteCase is the case of hack/flyte-testdata/generator/cases.go.
	flyteCase string
	// launch are launch's flags beyond the case.
	launch []string
	// source is the mpi.flyte.org/worker-command-source the webhook and the
	// policy give its job; SourceNone for a task that declares no worker
	// command, which they leave as Flyte made it.
	source mutate.Source
}

// declares reports whether the task declares a worker command, sshd, which its ranks need.
func (t task) declares() bool { return t.source != mutate.SourceNone }

// The tasks. The first two declare no worker command: their ranks run in the
// workers' `sleep 365d`, started there by kubectl exec. The others declare
// sshd, each in its own way, and their ranks check that it answers.
var (
	mpiNothing     = task{name: "an MPI task that declares no worker command", flyteCase: fixtures.MPIPlain, source: mutate.SourceNone}
	horovodNothing = task{name: "a Horovod task that declares no worker command",
		flyteCase: fixtures.HorovodNoWorkerCommand, source: mutate.SourceNone}
	mpiDeclared = task{name: "an MPI task that declares Worker(command=sshd ...)", flyteCase: fixtures.MPIPlain,
		launch: []string{"-worker-command", sshdJSON(), "-env", workerService}, source: mutate.SourceFlyteWorkerArgs}
	horovodDeclared = task{name: "a Horovod task that declares Worker(command=sshd ...)", flyteCase: horovodCase,
		launch: []string{"-env", workerService}, source: mutate.SourceFlyteWorkerArgs}
	horovodTaskCustom = task{name: "a Horovod task whose annotation mpi.flyte.org/task-custom declares sshd",
		flyteCase: fixtures.HorovodTaskAnnotations, launch: []string{"-env", workerService}, source: mutate.SourceTaskCustom}
	mpiWorkerSpecCommand = task{name: "an MPI task whose annotation mpi.flyte.org/worker-spec-command declares sshd",
		flyteCase: fixtures.MPIPlain, source: mutate.SourceWorkerSpecCommand, launch: []string{
			"-task-annotation", mutate.AnnotationWorkerSpecCommand + "=" + fixtures.SSHDLine, "-env", workerService}}
)

// sshdJSON is fixtures.SSHD as launch's -worker-command takes it.
func sshdJSON() string {
	b, err := json.Marshal(fixtures.SSHD)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// condition returns the status of job's condition of type kind ("" if none), and its message.
func condition(ctx context.Context, g Gomega, job *unstructured.Unstructured, kind string) (string, string) {
	_, conditions := readConditions(ctx, g, job)
	for _, c := range conditions {
		if c["type"] == kind {
			return fmt.Sprint(c["status"]), fmt.Sprint(c["message"])
		}
	}
	return "", ""
}

// readConditions reads job again, and returns it and its status conditions.
func readConditions(ctx context.Context, g Gomega, job *unstructured.Unstructured) (*unstructured.Unstructured, []map[string]any) {
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(job.GroupVersionKind())
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), got)).To(Succeed())
	list, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
	var conditions []map[string]any
	for _, c := range list {
		if c, ok := c.(map[string]any); ok {
			conditions = append(conditions, c)
		}
	}
	return got, conditions
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

// launchFlyte runs Flyte's backend on t in a namespace of its own, expects
// Flyte to report no error, and returns the MPIJob it created.
func launchFlyte(ctx context.Context, t task) *unstructured.Unstructured {
	GinkgoHelper()
	ns := namespace(ctx)
	// -create-owner: the cluster serves FlyteWorkflows (flytepropeller runs
	// here), and its garbage collector would delete a job whose owner is not there.
	args := append([]string{"launch", "-kubeconfig", kubeconfig, "-namespace", ns, "-case", t.flyteCase, "-cpu", taskCPU,
		"-create-owner"}, t.launch...)
	out := run(ctx, 2*time.Minute, flyteBackend, args...)
	var result struct {
		Phase       string          `json:"phase"`
		Error       json.RawMessage `json:"error"`
		HandleError json.RawMessage `json:"handleError"`
	}
	Expect(json.Unmarshal([]byte(out), &result)).To(Succeed(), out)
	Expect(result.HandleError).To(BeEmpty(), "Flyte's backend: %s", out)
	Expect(result.Error).To(BeEmpty(), "Flyte's backend: %s", out)
	fmt.Fprintf(GinkgoWriter, "Flyte reports for %s: %s", t.name, out)
	return onlyJob(ctx, ns)
}

// launchAll launches every task at once, each in a namespace of its own,
// and returns their jobs, in the tasks' order.
func launchAll(ctx context.Context, tasks []task) []*unstructured.Unstructured {
	GinkgoHelper()
	jobs := make([]*unstructured.Unstructured, len(tasks))
	for i, t := range tasks {
		jobs[i] = launchFlyte(ctx, t)
	}
	return jobs
}

// rankReport is what a rank of the job's task (hack/cluster/job/task.py) reports.
type rankReport struct {
	// Host is the rank's hostname: its Pod's name.
	Host string `json:"host"`
	// PID1 is what its Pod's PID 1 runs: the worker's command.
	PID1 string `json:"pid1"`
	// OK says whether it found the service the task asked for, if any.
	OK bool `json:"ok"`
	// SSH is the SSH session its orted came in by, "CLIENT_IP CLIENT_PORT
	// SERVER_IP SERVER_PORT" (sshd's SSH_CONNECTION), or "" when kubectl exec started it.
	SSH string `json:"ssh"`
}

// rankLine is a rank's report in the launcher's log: mpirun forwards the
// ranks' output, and horovodrun's remote commands write to its own.
var rankLine = regexp.MustCompile(`(?m)^rank [0-9]+: (\{.*\})$`)

// launcherLog returns the log of job's launcher.
func launcherLog(ctx context.Context, job *unstructured.Unstructured) string {
	GinkgoHelper()
	logs, err := clientset.CoreV1().Pods(job.GetNamespace()).GetLogs(job.GetName()+"-launcher",
		&corev1.PodLogOptions{Container: "mpi"}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	return string(logs)
}

// ranks returns the reports of the ranks in the launcher's log, by host.
func ranks(log string) map[string]rankReport {
	GinkgoHelper()
	reports := map[string]rankReport{}
	for _, match := range rankLine.FindAllStringSubmatch(log, -1) {
		var r rankReport
		Expect(json.Unmarshal([]byte(match[1]), &r)).To(Succeed(), match[0])
		reports[r.Host] = r
	}
	return reports
}

// expectRanIn checks, from its launcher's log, that each rank of job ran in
// a worker of its own, whose PID 1 runs pid1, the worker command (sshd's
// title adds to its command line), and found what its task asked for; and
// that the launcher ran kubexec.sh's /opt/kube/kubectl once for each worker. The
// traces of the two kubexec.sh, which run at once, may interleave in the
// log: the ranks' reports, each written whole, say where they ran.
func expectRanIn(ctx context.Context, job *unstructured.Unstructured, pid1 []string) {
	GinkgoHelper()
	log := launcherLog(ctx, job)
	Expect(strings.Count(log, "/opt/kube/kubectl")).To(Equal(2), "the launcher's log:\n%s", log)
	got := ranks(log)
	for i := range 2 {
		worker := fmt.Sprintf("%s-worker-%d", job.GetName(), i)
		Expect(got).To(HaveKeyWithValue(worker, And(HaveField("OK", BeTrue()),
			HaveField("PID1", ContainSubstring(strings.Join(pid1, " "))))), "the launcher's log:\n%s", log)
	}
	Expect(got).To(HaveLen(2), "the launcher's log:\n%s", log)
}

// verdict waits until job has Succeeded or Failed, and returns which
// ("Succeeded" or "Failed"), with the condition's message.
func verdict(ctx context.Context, job *unstructured.Unstructured) (string, string) {
	GinkgoHelper()
	var outcome, message string
	Eventually(ctx, func(g Gomega) {
		for _, kind := range []string{"Failed", "Succeeded"} {
			if status, m := condition(ctx, g, job, kind); status == "True" {
				outcome, message = kind, m
				return
			}
		}
		g.Expect(outcome).NotTo(BeEmpty(), "the MPIJob has neither Succeeded nor Failed")
	}).WithTimeout(jobTimeout).WithPolling(2 * poll).Should(Succeed())
	return outcome, message
}

// expectSucceeded waits for job's verdict and expects Succeeded, with each
// rank in a worker whose PID 1 runs pid1.
func expectSucceeded(ctx context.Context, job *unstructured.Unstructured, pid1 []string) {
	GinkgoHelper()
	outcome, message := verdict(ctx, job)
	Expect(outcome).To(Equal("Succeeded"), "%s: %s\nthe launcher's log:\n%s", outcome, message, launcherLog(ctx, job))
	expectRanIn(ctx, job, pid1)
}

// expectUnchanged checks that the stored job's containers run what Flyte
// gave them (testdata/flyte's job of flyteCase), and that it carries no
// worker-command source.
func expectUnchanged(job *unstructured.Unstructured, flyteCase string) {
	GinkgoHelper()
	want, err := fixtures.FlyteJob("v1", flyteCase)
	Expect(err).NotTo(HaveOccurred())
	for _, replica := range []string{"Launcher", "Worker"} {
		path := []string{"spec", "mpiReplicaSpecs", replica, "template", "spec", "containers"}
		wantContainers, _, _ := unstructured.NestedSlice(want.Object, path...)
		gotContainers, _, _ := unstructured.NestedSlice(job.Object, path...)
		Expect(gotContainers).To(HaveLen(len(wantContainers)))
		for i := range wantContainers {
			for _, field := range []string{"command", "args"} {
				Expect(cmp.Diff(wantContainers[i].(map[string]any)[field], gotContainers[i].(map[string]any)[field])).
					To(BeEmpty(), "%s container %d's %s (-want +got)", replica, i, field)
			}
		}
	}
	Expect(job.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
}

// expectRestored checks that the stored job's worker runs sshd, the command
// its task declared, with source.
func expectRestored(job *unstructured.Unstructured, source mutate.Source) {
	GinkgoHelper()
	command, _, _ := unstructured.NestedStringSlice(workerContainer(job), "command")
	_, hasArgs := workerContainer(job)["args"]
	Expect(command).To(Equal(fixtures.SSHD))
	Expect(hasArgs).To(BeFalse(), "the worker keeps args beside its command")
	Expect(job.GetAnnotations()).To(HaveKeyWithValue(mutate.AnnotationWorkerCommandSource, string(source)))
}

// runWithAddOn launches every task at once, each in a namespace of its own,
// with the webhook or the policy installed, and expects each job to
// succeed: the tasks that declare nothing stored as Flyte made them, their
// ranks in the workers' `sleep 365d`; the others with their worker running
// sshd, which each rank found. It returns the jobs, in the tasks' order.
func runWithAddOn(ctx context.Context, tasks ...task) []*unstructured.Unstructured {
	GinkgoHelper()
	jobs := launchAll(ctx, tasks)
	for i, t := range tasks {
		By(t.name)
		if t.declares() {
			expectRestored(jobs[i], t.source)
			expectSucceeded(ctx, jobs[i], fixtures.SSHD)
		} else {
			expectUnchanged(jobs[i], t.flyteCase)
			expectSucceeded(ctx, jobs[i], sleep365d)
		}
	}
	return jobs
}

// sleep365d is what the training-operator runs in a worker without a command.
var sleep365d = []string{"sleep", "365d"}

var _ = Describe("a single-node cluster", Ordered, func() {
	It("runs a Pod on its node, from the job's image", func(ctx SpecContext) {
		ns := namespace(ctx)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "hello", Image: jobImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"/bin/sh", "-c", "mpirun --version && python -c 'import mpi4py' && test -x /usr/sbin/sshd"},
				}},
			},
		}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		Eventually(ctx, func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded), "%+v", pod.Status.ContainerStatuses)
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
	})

	It("without the add-on, runs the tasks that declare no worker command, and not those that declare one", func(ctx SpecContext) {
		tasks := []task{mpiNothing, horovodNothing, mpiDeclared, horovodDeclared}
		jobs := launchAll(ctx, tasks)
		for i, t := range tasks {
			By(t.name)
			if !t.declares() {
				expectUnchanged(jobs[i], t.flyteCase)
				expectSucceeded(ctx, jobs[i], sleep365d)
				continue
			}
			// Flyte wrote the declared sshd into the worker's args, with no
			// command: the operator runs `sleep 365d` in its place, the ranks
			// find no service, and the launcher fails.
			worker := workerContainer(jobs[i])
			Expect(worker).NotTo(HaveKey("command"))
			args, _, _ := unstructured.NestedStringSlice(worker, "args")
			Expect(args).To(Equal(fixtures.SSHD))
			outcome, message := verdict(ctx, jobs[i])
			log := launcherLog(ctx, jobs[i])
			Expect(outcome).To(Equal("Failed"), "%s: %s\nthe launcher's log:\n%s", outcome, message, log)
			for host, r := range ranks(log) {
				Expect(r.PID1).To(Equal(strings.Join(sleep365d, " ")), host)
				Expect(r.OK).To(BeFalse(), host)
			}
			Expect(ranks(log)).To(HaveLen(2), "the launcher's log:\n%s", log)
		}
	})

	It("without the add-on, Flyte's controller fails the workflow whose task declares a worker command, after its retry, "+
		"and runs the one that declares none", func(ctx SpecContext) {
		runWorkflows(ctx, "without the add-on",
			flyteWorkflow{task: mpiDeclared, retries: 1,
				want: workflowOutcome{Phase: "Failed", NodePhase: "Failed", Attempts: 2,
					ErrorCode: "RetriesExhausted|DownstreamSystemError", ErrorKind: "USER",
					Error: "[2/2] currentAttempt done. Last Error: USER::Job failed"}},
			flyteWorkflow{task: mpiNothing, retries: 1, want: succeeded})
	})

	It("with patched flytepropeller (the upstream fix) and no add-on, Flyte's controller runs the workflow that fails "+
		"without the add-on to Succeeded at its first attempt, the worker running the command its task declares",
		Label("upstream"), func(ctx SpecContext) {
			usePropeller(ctx, patchedPropellerBinary)
			runWorkflows(ctx, "patched flytepropeller, without the add-on", patchedWorkflows()...)
		})

	// Only when the label filter asks for it (onlyWhenAsked); here, where
	// nothing is installed yet, as at its start and end.
	It("what a Flyte user waits: the workflow that fails without the add-on, alone, under patched flytepropeller "+
		"without the add-on, and under flytepropeller as published with the webhook and with the policy, arm by arm, "+
		"three rounds, each run Succeeded at its first attempt", Label(timingLabel), timingSpec)

	It("before it installs, publishes the release to the registry signed with a key (make publish), "+
		"and verifies it there with the README's \"With a key\" commands", func(ctx SpecContext) {
		generateKeys(ctx)
		publish(ctx)
		Expect(filepath.Join(releaseDir, "published.env")).To(BeAnExistingFile())
		_, served := registryManifest(ctx, releaseVersion)
		Expect(served).To(Equal(releasedDigest()), "the digest make publish pushed under %s", releaseVersion)
		expectVerification(ctx, "as published", verifierDir(releaseKey), verifyCommands(), "")
	})

	It("refuses, with the README's \"With a key\" commands, the image pushed under the release's tag with another digest "+
		"and another key's signature, and every file checked with another key's cosign.pub", func(ctx SpecContext) {
		commands := verifyCommands()
		tampered, restored := pushTampered(ctx), false
		// Whatever happens next, the tag goes back on the release's digest
		// before the install, which pushes and pins that digest.
		DeferCleanup(func(ctx context.Context) {
			if !restored {
				restoreTag(ctx)
			}
		})
		expectVerification(ctx, "the tag on "+tampered+", signed with another key", verifierDir(releaseKey), commands,
			" "+imageRepository()+":")
		restoreTag(ctx)
		restored = true
		expectVerification(ctx, "the tag back on the release's digest", verifierDir(releaseKey), commands, "")
		expectVerification(ctx, "the reader's cosign.pub another key's", verifierDir(otherKey), commands, "cosign ")
	})

	It("installs the webhook as the README says: skopeo copy and helm push to the registry, helm install oci://; "+
		"both replicas Ready under Pod Security restricted, running the released image, pulled by its digest", func(ctx SpecContext) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhookNamespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
		}}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		script := forRelease(readme.helm)
		Expect(script).To(ContainSubstring("helm install "+release+" "+chartRef()+" --version "+chartVersion()),
			"the README installs the chart from the registry")
		sh(ctx, releaseFiles(imageTar(), chartFile()), script)
		expectRegistryHoldsRelease(ctx)

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
		expectPodsRunReleasedImage(ctx)
	})

	It("helm test passes, mode webhook: its Pod, as a ServiceAccount that may only create MPIJobs in the test's namespace, "+
		"has the API server store, with a dry run, Flyte's MPIJobs with their worker command", func(ctx SpecContext) {
		expectHelmTest(ctx, "webhook")
	})

	It("with the webhook, leaves the tasks that declare no worker command as Flyte made them, and they run", func(ctx SpecContext) {
		runWithAddOn(ctx, mpiNothing, horovodNothing)
	})

	It("with the webhook, runs the worker command each task declares: in Worker(command=...) and in each annotation", func(ctx SpecContext) {
		runWithAddOn(ctx, mpiDeclared, horovodDeclared, horovodTaskCustom, mpiWorkerSpecCommand)
	})

	It("with the webhook, Flyte's controller runs each workflow to Succeeded, and fails the one with an invalid annotation at once",
		func(ctx SpecContext) {
			// A denial is no job to retry: the task fails at its first attempt, with the webhook's message.
			runWorkflows(ctx, "webhook", withAddOn(workflowOutcome{Phase: "Failed", NodePhase: "Failed", Attempts: 1,
				ErrorCode: "BadTaskFormat", ErrorKind: "USER", Error: `admission webhook "` + webhookName + `" denied the request: ` +
					mutate.AnnotationTaskCustom + `: is neither a JSON object nor standard base64: illegal base64 data at input byte 3`})...)
		})

	It("with patched flytepropeller and the webhook, Flyte's controller runs each workflow to Succeeded at its first attempt: "+
		"the webhook leaves the command the task declares as Flyte made it, and applies an annotation's as before",
		Label("upstream"), func(ctx SpecContext) {
			usePropeller(ctx, patchedPropellerBinary)
			runWorkflows(ctx, "patched flytepropeller, webhook", patchedWorkflows(horovodTaskCustom)...)
		})

	It("admits every job with its worker command through a rollout, a deleted webhook Pod and a kubelet restart", func(ctx SpecContext) {
		ns := namespace(ctx)
		jobs := startCreating(ns)
		DeferCleanup(jobs.finish)

		By("helm upgrade to a new image reference: another tag, the same digest")
		helmUpgrade(ctx, "image.tag=rollout")
		awaitBothReplicas(ctx)
		Expect(webhookDeployment(ctx).Spec.Template.Spec.Containers[0].Image).
			To(Equal(imageRepository() + ":rollout@" + releasedDigest()))

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

	Context("with the chart's alerts in a real Prometheus, on real faults (docs/RUNBOOKS.md)", Ordered, alertSpecs)

	It("on the node's network and another port (webhook.hostNetwork, webhook.port=10260), as on EKS with a custom CNI: "+
		"the API server calls it at the node's address, and the declared worker command runs", func(ctx SpecContext) {
		// Pod Security's baseline and restricted levels refuse the node's network: the README says so.
		podSecurity(ctx, "privileged")
		DeferCleanup(podSecurity, "restricted")
		// One replica: on one node, a second would want the ports the first holds.
		helmUpgrade(ctx, "webhook.hostNetwork=true,webhook.port=10260,webhook.probePort=10261,webhook.metricsPort=10262,replicas=1")
		Eventually(ctx, func(g Gomega) {
			pods := webhookPods(ctx, g)
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Spec.HostNetwork).To(BeTrue())
			g.Expect(pods[0].Status.PodIP).To(Equal(nodeIP))
			g.Expect(podReady(pods[0])).To(BeTrue())
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
		runWithAddOn(ctx, mpiDeclared)
		helmUpgrade(ctx, "webhook.hostNetwork=false,webhook.port=9443,webhook.probePort=8081,webhook.metricsPort=8080,replicas=2")
		awaitBothReplicas(ctx)
	})

	It("helm test passes, mode both: the policy stores the declared worker command, the webhook the annotated one", func(ctx SpecContext) {
		helmUpgrade(ctx, "mode=both")
		awaitBothReplicas(ctx)
		expectHelmTest(ctx, "both")
		helmUpgrade(ctx, "mode=webhook")
		awaitBothReplicas(ctx)
	})

	It("helm uninstall, mode webhook, while Flyte's jobs are created: its pre-delete hook deletes the webhook configuration "+
		"first, every job created during it and in the "+afterUninstall.String()+" after is admitted, and nothing of the "+
		"release or its hook is left; then it installs again as the README says", func(ctx SpecContext) {
		uninstallWhileCreating(ctx)
		reinstall(ctx)
	})

	It("helm uninstall after its namespace was deleted: every Flyte job refused, naming the Service; "+
		"the runbook's one command admits them again; then it installs again as the README says", func(ctx SpecContext) {
		expectNamespaceDeletedFirst(ctx)
		reinstall(ctx)
	})

	// Alone: make test-cluster TEST_CLUSTER_ARGS=-ginkgo.label-filter=gitops
	Context("installed as a GitOps sync installs it, helm template applied twice with kubectl, certificates.source self",
		Ordered, Label("gitops"), gitopsSpecs)

	It("in policy mode, with no webhook Pod, runs the declared worker commands and leaves the other tasks alone", func(ctx SpecContext) {
		helmUpgrade(ctx, "mode=policy")
		Eventually(ctx, func(g Gomega) {
			var deployments appsv1.DeploymentList
			g.Expect(k8sClient.List(ctx, &deployments, client.InNamespace(webhookNamespace))).To(Succeed())
			g.Expect(deployments.Items).To(BeEmpty())
			var pods corev1.PodList
			g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(webhookNamespace))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty())
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())

		awaitPolicyLoaded(ctx, "v1")
		runWithAddOn(ctx, mpiNothing, horovodNothing, mpiDeclared, horovodDeclared)
	})

	It("in policy mode, Flyte's controller runs each workflow to Succeeded, the one with an invalid annotation as Flyte made it",
		func(ctx SpecContext) {
			// The policy reads no annotation: the job is admitted as Flyte made it, and runs as one that declares nothing.
			runWorkflows(ctx, "policy", withAddOn(succeeded)...)
		})

	It("with patched flytepropeller and the policy, Flyte's controller runs each workflow to Succeeded at its first attempt, "+
		"the policy leaving the command the task declares as Flyte made it",
		Label("upstream"), func(ctx SpecContext) {
			usePropeller(ctx, patchedPropellerBinary)
			runWorkflows(ctx, "patched flytepropeller, policy", patchedWorkflows()...)
		})

	It("helm test passes, mode policy: the API server alone stores the declared worker command", func(ctx SpecContext) {
		helmUpgrade(ctx, "mode=policy")
		expectHelmTest(ctx, "policy")
	})

	It("installs the policy from the release's one file, as the README says, and runs the declared worker commands", func(ctx SpecContext) {
		helm(ctx, "uninstall", release, "--namespace", webhookNamespace, "--wait", "--timeout", "3m")
		const file = "install-policy-only.yaml"
		script := strings.Replace(forRelease(readme.oneFile), " install.yaml ", " "+file+" ", 1)
		Expect(script).To(ContainSubstring(file), "the README's one file is install.yaml")
		dir := releaseFiles(file)
		sh(ctx, dir, script)
		awaitPolicyLoaded(ctx, "v1")
		runWithAddOn(ctx, mpiDeclared, horovodDeclared)
		sh(ctx, dir, "kubectl delete -f "+file)
		awaitNamespaceGone(ctx, webhookNamespace)
	})

	It("installs the policy with the README's kustomize overlay, in namespace "+overlayNamespace+", and runs the declared worker commands",
		func(ctx SpecContext) {
			overlay := writeOverlay(readme.overlay)
			sh(ctx, filepath.Dir(overlay), "kubectl apply -k "+filepath.Base(overlay))
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: overlayNamespace}, &corev1.Namespace{})).To(Succeed())
			awaitPolicyLoaded(ctx, "v1")
			runWithAddOn(ctx, mpiDeclared, horovodDeclared)
		})

	It("under training-operator v1.9.4, runs the tasks with the overlay's policy as under v1.8.1", func(ctx SpecContext) {
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: overlayNamespace}, &corev1.Namespace{})).To(Succeed(),
			"the overlay is not installed")
		switchOperator(ctx)
		jobs := runWithAddOn(ctx, mpiNothing, mpiDeclared, horovodDeclared)
		// v1.9's launcher takes its kubectl from v1.9's default image: the jobs ran under v1.9.4.
		launcher := &corev1.Pod{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: jobs[0].GetNamespace(), Name: jobs[0].GetName() + "-launcher"},
			launcher)).To(Succeed())
		Expect(launcher.Spec.InitContainers).NotTo(BeEmpty())
		Expect(launcher.Spec.InitContainers[0].Image).To(Equal("ghcr.io/kubeflow/training-v1/kubectl-delivery:latest"))
		overlay := writeOverlay(readme.overlay) // the same as the overlay's spec wrote
		sh(ctx, filepath.Dir(overlay), "kubectl delete -k "+filepath.Base(overlay))
		awaitNamespaceGone(ctx, overlayNamespace)
	})

	// mpi-operator's CRD has the training-operator's name, mpijobs.kubeflow.org:
	// it comes last, in place of the training-operator's (cluster.sh switch-mpi-operator).
	It("under mpi-operator v0.8.2 (kubeflow.org/v2beta1), without the add-on: a worker runs its image's entrypoint "+
		"with the args Flyte gave it", func(ctx SpecContext) {
		switchMPIOperator(ctx)
		plainDeclares := v2beta1Case{image: jobImage, declares: true}
		entrypointDeclares := v2beta1Case{image: entrypointImage, declares: true}
		plainNothing := v2beta1Case{image: jobImage}
		entrypointNothing := v2beta1Case{image: entrypointImage}
		jobs, outcomes := runV2beta1(ctx, plainDeclares, entrypointDeclares, plainNothing, entrypointNothing)
		for i, c := range []v2beta1Case{plainDeclares, entrypointDeclares, plainNothing, entrypointNothing} {
			expectStoredWith(jobs[i], c, mutate.SourceNone)
		}
		// On an image without an ENTRYPOINT the args are the command: the
		// declared sshd runs, the launcher's mpirun logs in, and the job succeeds.
		Expect(outcomes[0].verdict).To(Equal("Succeeded"), "%s\n%s", outcomes[0], outcomes[0].log)
		expectRanOverSSH(ctx, jobs[0], outcomes[0])
		// Behind an ENTRYPOINT that does not run them, the args are the
		// script's: every container of the job, the launcher's too, exits 2,
		// the launcher once more for its retry.
		for _, o := range []v2beta1Outcome{outcomes[1], outcomes[3]} {
			Expect(o.verdict).To(Equal("Failed"), "%s\n%s", o, o.log)
			Expect(o.workers).To(HaveEach(HaveSuffix("exited 2")), o.String())
			Expect(o.launchers).To(Equal(2), o.String())
			Expect(o.log).To(ContainSubstring("neither mpirun"), "the launcher ran the script: %s", o)
		}
		// Without a declared worker command, each worker runs the task's own
		// mpirun line, which Flyte copied: its two ranks meet in that one
		// worker, and fail (exit 1); no sshd runs, and the launcher fails, twice.
		Expect(outcomes[2].verdict).To(Equal("Failed"), "%s\n%s", outcomes[2], outcomes[2].log)
		Expect(outcomes[2].workers).To(HaveEach(HaveSuffix("exited 1")), outcomes[2].String())
		Expect(outcomes[2].launchers).To(Equal(2), outcomes[2].String())
	})

	It("under mpi-operator v0.8.2, with the webhook: every worker runs the declared sshd, whatever the image's ENTRYPOINT; "+
		"a job that declares nothing is left as Flyte made it", func(ctx SpecContext) {
		sh(ctx, releaseFiles(imageTar(), chartFile()), forRelease(readme.helm))
		awaitBothReplicas(ctx)
		plain := v2beta1Case{image: jobImage, declares: true}
		entrypoint := v2beta1Case{image: entrypointImage, declares: true}
		// On the image whose job fails soonest: the image is not what the webhook looks at.
		nothing := v2beta1Case{image: entrypointImage}
		jobs, outcomes := runV2beta1(ctx, plain, entrypoint, nothing)
		expectStoredWith(jobs[0], plain, mutate.SourceFlyteWorkerArgs)
		expectStoredWith(jobs[1], entrypoint, mutate.SourceFlyteWorkerArgs)
		expectStoredWith(jobs[2], nothing, mutate.SourceNone)
		Expect(outcomes[2].verdict).To(Equal("Failed"), "%s\n%s", outcomes[2], outcomes[2].log)
		Expect(outcomes[2].workers).To(HaveEach(HaveSuffix("exited 2")), outcomes[2].String())
		Expect(outcomes[0].verdict).To(Equal("Succeeded"), "%s\n%s", outcomes[0], outcomes[0].log)
		expectRanOverSSH(ctx, jobs[0], outcomes[0])
		// The webhook gives the worker its command; the launcher keeps the
		// args Flyte gave it, which the ENTRYPOINT takes as the script's.
		Expect(outcomes[1].verdict).To(Equal("Failed"), "%s\n%s", outcomes[1], outcomes[1].log)
		Expect(outcomes[1].workers).To(HaveEach(HaveSuffix("running")), outcomes[1].String())
		Expect(outcomes[1].launchers).To(Equal(2), outcomes[1].String())
		Expect(outcomes[1].log).To(ContainSubstring("neither mpirun"), "the launcher ran the script: %s", outcomes[1])
	})

	It("under mpi-operator v0.8.2, with the policy: the declared sshd runs, and the launcher reaches it over SSH",
		func(ctx SpecContext) {
			helmUpgrade(ctx, "mode=policy")
			awaitPolicyLoaded(ctx, "v2beta1")
			plain := v2beta1Case{image: jobImage, declares: true}
			jobs, outcomes := runV2beta1(ctx, plain)
			expectStoredWith(jobs[0], plain, mutate.SourceFlyteWorkerArgs)
			Expect(outcomes[0].verdict).To(Equal("Succeeded"), "%s\n%s", outcomes[0], outcomes[0].log)
			expectRanOverSSH(ctx, jobs[0], outcomes[0])
			helm(ctx, "uninstall", release, "--namespace", webhookNamespace, "--wait", "--timeout", "3m")
		})
})

// chartFile is the release's chart, as make release packaged it.
func chartFile() string { return "flyte-mpi-webhook-" + chartVersion() + ".tgz" }

// helmUpgrade upgrades the release with the chart from the registry, its values and set.
func helmUpgrade(ctx context.Context, set string) {
	GinkgoHelper()
	helm(ctx, "upgrade", release, chartRef(), "--version", chartVersion(), "--namespace", webhookNamespace,
		"--reuse-values", "--set", set, "--wait", "--timeout", "3m")
}

// suspendedFlyteJob returns testdata/flyte's horovodCase job of version
// (v1, v2beta1), named name in namespace, suspended so that the operator
// starts no Pods for it.
func suspendedFlyteJob(version, namespace, name string) *unstructured.Unstructured {
	GinkgoHelper()
	job, err := fixtures.FlyteJob(version, horovodCase)
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

// podSecurity sets the Pod Security level the webhook's namespace enforces.
func podSecurity(ctx context.Context, level string) {
	GinkgoHelper()
	ns := &corev1.Namespace{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: webhookNamespace}, ns)).To(Succeed())
	patch := client.MergeFrom(ns.DeepCopy())
	ns.Labels["pod-security.kubernetes.io/enforce"] = level
	Expect(k8sClient.Patch(ctx, ns, patch)).To(Succeed())
}
