// Package mpioperator_test runs mpi-operator's controller (kubeflow.org/v2beta1)
// against an API server with the webhook, and checks the Pods it creates for
// the jobs Flyte creates.
package mpioperator_test

import (
	"context"
	"net"
	"strconv"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/e2e/operator"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

func TestMPIOperator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "e2e mpi-operator kubeflow.org/v2beta1")
}

// lockNamespace holds mpi-operator's leader-election Lease.
const lockNamespace = "mpi-operator"

// healthCheckAddress is where mpi-operator v0.8.2 serves its health check:
// a constant in its code, not a flag.
const healthCheckAddress = ":8080"

// What mpi-operator v0.8.2 (pkg/controller/mpi_job_controller.go) gives the
// first container of a replica, the one it treats as the MPI container, for
// a job that leaves spec.mpiImplementation (OpenMPI) and
// spec.sshAuthMountPath to their defaults.
var (
	// sshMount is the job's SSH key pair (setupSSHOnPod), in both replicas.
	sshMount = corev1.VolumeMount{Name: "ssh-auth", MountPath: "/root/.ssh"}
	// configMount is the hostfile and discover_hosts.sh, in the launcher.
	configMount = corev1.VolumeMount{Name: "mpi-job-config", MountPath: "/etc/mpi"}
	// workerEnv is what every worker's first container gets.
	workerEnv = []corev1.EnvVar{{Name: "K_MPI_JOB_ROLE", Value: "worker"}}
)

// launcherEnv is what the launcher's first container gets, for a job with
// slots slots per worker that does not run the launcher as a worker.
func launcherEnv(slots int) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "K_MPI_JOB_ROLE", Value: "launcher"},
		{Name: "OMPI_MCA_orte_keep_fqdn_hostnames", Value: "true"},
		{Name: "OMPI_MCA_orte_default_hostfile", Value: "/etc/mpi/hostfile"},
		{Name: "OMPI_MCA_plm_rsh_args", Value: "-o ConnectionAttempts=10"},
		{Name: "OMPI_MCA_orte_set_default_slots", Value: strconv.Itoa(slots)},
		{Name: "NVIDIA_VISIBLE_DEVICES"},
		{Name: "NVIDIA_DRIVER_CAPABILITIES"},
	}
}

var cluster = &operator.Cluster{}

var _ = BeforeSuite(func(ctx SpecContext) {
	binary, err := operator.Binary("MPI_OPERATOR_BIN")
	Expect(err).NotTo(HaveOccurred())
	// Fail here, and say why, rather than wait for Pods from a controller that
	// exits at once because it cannot listen.
	l, err := net.Listen("tcp", healthCheckAddress)
	Expect(err).NotTo(HaveOccurred(), "mpi-operator serves its health check on %s, a constant; free the port", healthCheckAddress)
	Expect(l.Close()).To(Succeed())

	cluster.Env, err = framework.Start(ctx, "v2beta1")
	Expect(err).NotTo(HaveOccurred())
	Expect(cluster.Env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lockNamespace}})).To(Succeed())
	cluster.StartController("mpi-operator", binary, nil, func(kubeconfig string) []string {
		return []string{"--kubeConfig", kubeconfig, "--lock-namespace", lockNamespace,
			"--kube-api-qps", "100", "--kube-api-burst", "200"}
	})
}, NodeTimeout(framework.StartTimeout))

var _ = AfterSuite(cluster.Stop)

var _ = Describe("mpi-operator v0.8.2", func() {
	var namespace string

	BeforeEach(func(ctx SpecContext) {
		namespace = cluster.Namespace(ctx)
	})

	It("runs sshd in every worker of a Flyte Horovod job with the annotation, and leaves the launcher alone", func(ctx SpecContext) {
		job := cluster.Env.Job(namespace, fixtures.HorovodTaskAnnotations).Obj()
		sent := cluster.Create(ctx, job)

		Expect(workerPods(ctx, job)).To(HaveEach(operator.Runs(fixtures.SSHD, nil)))
		Expect(launcherPod(ctx, job)).To(operator.Runs(nil, operator.Args(sent, "Launcher")))
	})

	It("without the annotation, runs Flyte's copied task args in every worker instead of sshd", func(ctx SpecContext) {
		job := cluster.Env.Job(namespace, fixtures.HorovodNoWorkerCommand).Obj()
		cluster.Create(ctx, job)

		taskArgs := operator.Args(job, "Worker")
		Expect(taskArgs).To(ContainElement("pyflyte-execute"))
		Expect(workerPods(ctx, job)).To(HaveEach(operator.Runs(nil, taskArgs)))
	})

	// The jobs of tasks that declare their worker command, as Flyte would
	// create them in v2beta1: with no annotation, the declaration is in the
	// Worker's args. mpi-operator leaves a container with args alone: without
	// the webhook, the worker runs its image's entrypoint with those args.
	DescribeTable("a Flyte-built job whose task declares its worker command, with no annotation",
		func(ctx SpecContext, name string, hooked bool, command, args []string) {
			sent, job := cluster.CreateDeclared(ctx, namespace, name, hooked)
			Expect(workerPods(ctx, job)).To(HaveEach(operator.Runs(command, args)))
			Expect(launcherPod(ctx, job)).To(operator.Runs(nil, operator.Args(sent, "Launcher")))
		},
		Entry("Worker(command=sshd…): the webhook makes the args the command, and every worker runs sshd",
			fixtures.HorovodWorkerCommand, true, fixtures.SSHD, nil),
		Entry("Worker(command=sshd…) without the webhook: every worker keeps sshd as args, after its image's entrypoint",
			fixtures.HorovodWorkerCommand, false, nil, fixtures.SSHD),
		Entry("Worker(command=sshd…), fast-registered: every worker runs sshd",
			fixtures.HorovodFastRegisterWorkerCommand, true, fixtures.SSHD, nil),
		Entry("a v0 task's worker_spec_command: every worker runs sshd",
			fixtures.LegacyWorkerSpecCommand, true, fixtures.SSHD, nil),
	)

	// A pod template that lists a sidecar before the task's container puts it
	// first in both replicas. mpi-operator treats the first container of each
	// as the MPI container (newWorker, newLauncherPodTemplate, setupSSHOnPod):
	// so does the webhook.
	It("with a sidecar before the mpi container, runs sshd in the sidecar, which the controller treats as the MPI container", func(ctx SpecContext) {
		sent, job := cluster.CreateWithSidecar(ctx, namespace)

		// The webhook gives the sidecar the command, and the controller its
		// environment and the SSH keys; the mpi container keeps the task args
		// Flyte copied, which no operator looks at.
		worker := operator.Project(operator.Containers(sent, "Worker"))
		worker[0].Command = fixtures.SSHD
		worker[0].Env = append(worker[0].Env, workerEnv...)
		worker[0].VolumeMounts = append(worker[0].VolumeMounts, sshMount)
		for _, pod := range workerPods(ctx, job) {
			Expect(operator.Project(pod.Spec.Containers)).To(Equal(worker), "worker Pod %s", pod.Name)
		}

		launcher := operator.Project(operator.Containers(sent, "Launcher"))
		launcher[0].Env = append(launcher[0].Env, launcherEnv(slotsPerWorker(job))...)
		launcher[0].VolumeMounts = append(launcher[0].VolumeMounts, sshMount, configMount)
		Expect(operator.Project(launcherPod(ctx, job).Spec.Containers)).To(Equal(launcher))
	})
})

// workerPods waits for the controller to create the worker Pods of job, as
// the API server stored it, and returns them.
func workerPods(ctx context.Context, job *unstructured.Unstructured) []corev1.Pod {
	GinkgoHelper()
	return cluster.Pods(ctx, job.GetNamespace(), map[string]string{
		"training.kubeflow.org/job-name": job.GetName(),
		"training.kubeflow.org/job-role": "worker",
	}, operator.WorkerCount(job))
}

// launcherPod waits for the controller to create job's launcher, a batch
// Job, and returns the Pod that Job asks for: no Job controller creates it here.
func launcherPod(ctx context.Context, job *unstructured.Unstructured) corev1.Pod {
	GinkgoHelper()
	launcher := &batchv1.Job{}
	cluster.Object(ctx, client.ObjectKey{Namespace: job.GetNamespace(), Name: job.GetName() + "-launcher"}, launcher)
	return corev1.Pod{ObjectMeta: launcher.Spec.Template.ObjectMeta, Spec: launcher.Spec.Template.Spec}
}

// slotsPerWorker returns spec.slotsPerWorker of job, 1 when unset as for the controller.
func slotsPerWorker(job *unstructured.Unstructured) int {
	GinkgoHelper()
	slots, found, err := unstructured.NestedInt64(job.Object, "spec", "slotsPerWorker")
	Expect(err).NotTo(HaveOccurred())
	if !found {
		return 1
	}
	return int(slots)
}
