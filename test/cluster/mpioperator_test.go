package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// The last phase of the suite: mpi-operator v0.8.2 in place of the
// training-operator (cluster.sh switch-mpi-operator), and kubeflow.org/v2beta1
// MPIJobs, whose launcher's mpirun reaches the workers over SSH: the job's
// headless Service names them in the launcher's hostfile, the cluster DNS
// resolves those names, and each worker's sshd lets the launcher in with the
// key of the job's Secret.

const (
	// entrypointImage is the job's image with an ENTRYPOINT that does not run
	// the container's args as a command: the training script, to which they
	// are flags, as the training-operator's examples build theirs
	// (hack/cluster/job-image.sh). Started with no MPI around it, the script
	// exits 2, as an argparse script that meets flags it does not know does.
	entrypointImage = "flyte-mpi-webhook.test/job:entrypoint"
	// jobUser is the image's user, whom the v2beta1 jobs run as, and whose
	// home holds the sshd config and the mount of the job's SSH Secret.
	jobUser = int64(1000)
	// sshAuthMountPath is where mpi-operator mounts the job's SSH Secret.
	sshAuthMountPath = "/home/jobuser/.ssh"
	// sshdPort is where the image's sshd listens: a port its user can bind.
	sshdPort = "2222"
	// backoffLimit is the launcher's: one retry. Flyte retries a task itself,
	// and a task sets it with MPIJob(run_policy=RunPolicy(backoff_limit=1)); left
	// unset, the launcher's batch Job retries six times, for minutes, before
	// the MPIJob fails.
	backoffLimit = int64(1)
)

// v2beta1Case is one v2beta1 MPIJob of the phase: testdata/flyte's v2beta1
// MPI task (mpi-plain), on an image, declaring sshd as its worker command or
// nothing.
type v2beta1Case struct {
	// image is jobImage (no ENTRYPOINT) or entrypointImage.
	image string
	// declares says whether the task declares Worker(command=fixtures.SSHD),
	// which Flyte writes as the Worker's args.
	declares bool
}

func (c v2beta1Case) String() string {
	what := "declares nothing"
	if c.declares {
		what = "declares Worker(command=sshd ...)"
	}
	entrypoint := "no ENTRYPOINT"
	if c.image == entrypointImage {
		entrypoint = "ENTRYPOINT [python, /opt/train/train.py]"
	}
	return fmt.Sprintf("a v2beta1 MPI task that %s, on the image with %s", what, entrypoint)
}

// newV2beta1Job returns c's MPIJob in namespace: testdata/flyte's v2beta1
// mpi-plain, Flyte's labels, containers and args, with what mpi-operator's
// examples add (examples/v2beta1/pi: the job runs as the image's user, who
// holds the SSH Secret at sshAuthMountPath), the launcher's backoffLimit,
// 100m CPU a Pod (taskCPU), and c's image and declared worker command.
func newV2beta1Job(namespace string, c v2beta1Case) *unstructured.Unstructured {
	GinkgoHelper()
	job, err := fixtures.FlyteJob("v2beta1", fixtures.MPIPlain)
	Expect(err).NotTo(HaveOccurred())
	job.SetNamespace(namespace)
	job.SetOwnerReferences(nil)
	Expect(unstructured.SetNestedField(job.Object, sshAuthMountPath, "spec", "sshAuthMountPath")).To(Succeed())
	Expect(unstructured.SetNestedField(job.Object, backoffLimit, "spec", "runPolicy", "backoffLimit")).To(Succeed())
	for _, replica := range []string{"Launcher", "Worker"} {
		path := []string{"spec", "mpiReplicaSpecs", replica, "template", "spec", "containers"}
		containers, _, err := unstructured.NestedSlice(job.Object, path...)
		Expect(err).NotTo(HaveOccurred())
		container := containers[0].(map[string]any)
		container["image"] = c.image
		container["securityContext"] = map[string]any{"runAsUser": jobUser}
		for _, kind := range []string{"requests", "limits"} {
			Expect(unstructured.SetNestedField(container, taskCPU, "resources", kind, "cpu")).To(Succeed())
		}
		if replica == "Worker" && c.declares {
			args := make([]any, len(fixtures.SSHD))
			for i, word := range fixtures.SSHD {
				args[i] = word
			}
			container["args"] = args
		}
		Expect(unstructured.SetNestedSlice(job.Object, containers, path...)).To(Succeed())
	}
	return job
}

// v2beta1Outcome is what a v2beta1 job came to, as the suite measured it.
type v2beta1Outcome struct {
	// verdict is the MPIJob's Succeeded or Failed condition, with its message.
	verdict, message string
	// took is from the job's creation to that condition.
	took time.Duration
	// workers is what each worker's container was doing at the verdict: its
	// command line while running, or its exit code.
	workers []string
	// launchers is how many launcher Pods the launcher's Job ran.
	launchers int
	// log is the log of the last launcher Pod.
	log string
}

func (o v2beta1Outcome) String() string {
	return fmt.Sprintf("%s after %s (%s); workers: %s; %d launcher Pod(s), the last one's log ending:\n%s", o.verdict, o.took,
		o.message, strings.Join(o.workers, "; "), o.launchers, tail(o.log, 6))
}

// tail returns the last n lines of log.
func tail(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// createV2beta1 creates each case's job in a namespace of its own, and
// returns them, in the cases' order, as the API server stored them.
func createV2beta1(ctx context.Context, cases ...v2beta1Case) []*unstructured.Unstructured {
	GinkgoHelper()
	jobs := make([]*unstructured.Unstructured, len(cases))
	for i, c := range cases {
		jobs[i] = newV2beta1Job(namespace(ctx), c)
		Expect(k8sClient.Create(ctx, jobs[i])).To(Succeed(), c.String())
	}
	return jobs
}

// measure waits for job's verdict and returns what it came to.
func measure(ctx context.Context, job *unstructured.Unstructured) v2beta1Outcome {
	GinkgoHelper()
	var o v2beta1Outcome
	Eventually(ctx, func(g Gomega) {
		got, conditions := readConditions(ctx, g, job)
		for _, c := range conditions {
			if (c["type"] == "Succeeded" || c["type"] == "Failed") && c["status"] == "True" {
				o.verdict, o.message = fmt.Sprint(c["type"]), fmt.Sprint(c["message"])
				at, err := time.Parse(time.RFC3339, fmt.Sprint(c["lastTransitionTime"]))
				g.Expect(err).NotTo(HaveOccurred())
				o.took = at.Sub(got.GetCreationTimestamp().Time)
			}
		}
		g.Expect(o.verdict).NotTo(BeEmpty(), "the MPIJob has neither Succeeded nor Failed")
	}).WithTimeout(jobTimeout).WithPolling(2 * poll).Should(Succeed())

	for i := range 2 {
		pod := &corev1.Pod{}
		name := fmt.Sprintf("%s-worker-%d", job.GetName(), i)
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: job.GetNamespace(), Name: name}, pod)).To(Succeed())
		o.workers = append(o.workers, name+" "+containerState(pod))
	}
	var launchers corev1.PodList
	Expect(k8sClient.List(ctx, &launchers, client.InNamespace(job.GetNamespace()),
		client.MatchingLabels{"training.kubeflow.org/job-role": "launcher"})).To(Succeed())
	o.launchers = len(launchers.Items)
	if o.launchers > 0 {
		last := slices.MaxFunc(launchers.Items, func(a, b corev1.Pod) int {
			return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
		})
		logs, err := clientset.CoreV1().Pods(job.GetNamespace()).GetLogs(last.Name,
			&corev1.PodLogOptions{Container: "mpi"}).DoRaw(ctx)
		Expect(err).NotTo(HaveOccurred())
		o.log = string(logs)
	}
	return o
}

// containerState says what pod's first container is doing: running, or exited with a code.
func containerState(pod *corev1.Pod) string {
	if len(pod.Status.ContainerStatuses) == 0 {
		return "not started"
	}
	state := pod.Status.ContainerStatuses[0].State
	switch {
	case state.Running != nil:
		return "running"
	case state.Terminated != nil:
		return fmt.Sprintf("exited %d", state.Terminated.ExitCode)
	default:
		return "waiting"
	}
}

// expectRanOverSSH checks that job's launcher ran its ranks in its two
// workers over SSH: each rank reports its worker's Pod name, PID 1 sshd
// (the declared worker command), and the SSH session its orted came in by,
// to the worker's sshd on sshdPort; and the launcher has no rsh agent of
// the operator's (the training-operator's kubexec.sh), so Open MPI's own,
// ssh, started them.
func expectRanOverSSH(ctx context.Context, job *unstructured.Unstructured, o v2beta1Outcome) {
	GinkgoHelper()
	got := ranks(o.log)
	Expect(got).To(HaveLen(2), "the launcher's log:\n%s", o.log)
	for i := range 2 {
		worker := fmt.Sprintf("%s-worker-%d", job.GetName(), i)
		Expect(got).To(HaveKeyWithValue(worker, And(HaveField("OK", BeTrue()),
			HaveField("PID1", ContainSubstring(strings.Join(fixtures.SSHD, " "))),
			HaveField("SSH", HaveSuffix(" "+sshdPort)))), "the launcher's log:\n%s", o.log)
	}
	var launchers corev1.PodList
	Expect(k8sClient.List(ctx, &launchers, client.InNamespace(job.GetNamespace()),
		client.MatchingLabels{"training.kubeflow.org/job-role": "launcher"})).To(Succeed())
	for _, pod := range launchers.Items {
		for _, env := range pod.Spec.Containers[0].Env {
			Expect(env.Name).NotTo(Equal("OMPI_MCA_plm_rsh_agent"), "launcher Pod %s", pod.Name)
		}
	}
}

// runV2beta1 creates every case's job at once and returns what each came to,
// in the cases' order, writing each to the spec's output.
func runV2beta1(ctx context.Context, cases ...v2beta1Case) ([]*unstructured.Unstructured, []v2beta1Outcome) {
	GinkgoHelper()
	jobs := createV2beta1(ctx, cases...)
	outcomes := make([]v2beta1Outcome, len(jobs))
	for i, job := range jobs {
		outcomes[i] = measure(ctx, job)
		fmt.Fprintf(GinkgoWriter, "measured: %s: %s\n", cases[i], outcomes[i])
	}
	return jobs, outcomes
}

// switchMPIOperator replaces the training-operator by mpi-operator, with its CRD (cluster.sh).
func switchMPIOperator(ctx context.Context) {
	GinkgoHelper()
	run(ctx, 3*time.Minute, env("CLUSTER_SCRIPT"), "switch-mpi-operator")
}

// expectStoredWith checks the stored job's worker: sshd as its command with
// the source, or, for SourceNone, the args Flyte gave it and no command.
func expectStoredWith(job *unstructured.Unstructured, c v2beta1Case, source mutate.Source) {
	GinkgoHelper()
	if source != mutate.SourceNone {
		expectRestored(job, source)
		return
	}
	worker := workerContainer(job)
	Expect(worker).NotTo(HaveKey("command"))
	Expect(job.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
	if c.declares {
		args, _, _ := unstructured.NestedStringSlice(worker, "args")
		Expect(args).To(Equal(fixtures.SSHD))
	}
}
