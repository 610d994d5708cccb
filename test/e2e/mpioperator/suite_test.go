// Package mpioperator_test runs mpi-operator's controller (kubeflow.org/v2beta1)
// against an API server with the webhook, and checks the worker Pods it creates.
package mpioperator_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL
	. "github.com/onsi/gomega"    //nolint:revive // Gomega's DSL
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/e2e/operator"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
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

// createTimeout bounds the wait for the controller to create a job's Pods,
// its start included.
const createTimeout = 2 * time.Minute

var (
	env        *framework.Env
	controller *operator.Process
)

var _ = BeforeSuite(func(ctx SpecContext) {
	binary, err := operator.Binary("MPI_OPERATOR_BIN")
	Expect(err).NotTo(HaveOccurred())
	// Fail here, and say why, rather than wait for Pods from a controller that
	// exits at once because it cannot listen.
	l, err := net.Listen("tcp", healthCheckAddress)
	Expect(err).NotTo(HaveOccurred(), "mpi-operator serves its health check on %s, a constant; free the port", healthCheckAddress)
	Expect(l.Close()).To(Succeed())

	env, err = framework.Start(ctx, "v2beta1")
	Expect(err).NotTo(HaveOccurred())
	Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lockNamespace}})).To(Succeed())
	dir := GinkgoT().TempDir()
	kubeconfig, err := env.WriteKubeConfig(dir)
	Expect(err).NotTo(HaveOccurred())
	controller, err = operator.Start("mpi-operator", binary, kubeconfig, dir, nil,
		"--kubeConfig", kubeconfig, "--lock-namespace", lockNamespace,
		"--kube-api-qps", "100", "--kube-api-burst", "200")
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(framework.StartTimeout))

var _ = AfterSuite(func() {
	if controller != nil {
		Expect(controller.Stop()).To(Succeed())
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

var _ = Describe("mpi-operator v0.8.2", func() {
	var namespace string

	BeforeEach(func(ctx SpecContext) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
		Expect(env.Client.Create(ctx, ns)).To(Succeed())
		namespace = ns.Name
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(env.Client.Delete(ctx, ns))).To(Succeed())
		})
	})

	AfterEach(func() {
		if CurrentSpecReport().Failed() {
			fmt.Fprintf(GinkgoWriter, "mpi-operator's log ends with:\n%s\n", controller.LogTail(60))
		}
	})

	// workerPods waits for the controller to create the worker Pods of job, as
	// the API server stored it, and returns them.
	workerPods := func(ctx context.Context, job *unstructured.Unstructured) []corev1.Pod {
		GinkgoHelper()
		var pods []corev1.Pod
		Eventually(ctx, func(g Gomega) {
			if err := controller.Exited(); err != nil {
				StopTrying("mpi-operator is not running").Wrap(err).Now()
			}
			var err error
			pods, err = operator.Pods(ctx, env.Client, namespace, map[string]string{
				"training.kubeflow.org/job-name": job.GetName(),
				"training.kubeflow.org/job-role": "worker",
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods).To(HaveLen(workerReplicas(job)))
		}).WithTimeout(createTimeout).Should(Succeed())
		return pods
	}

	// launcher waits for the controller to create job's launcher, and returns
	// it: a batch Job, whose Pod no Job controller creates here.
	launcher := func(ctx context.Context, job *unstructured.Unstructured) *batchv1.Job {
		GinkgoHelper()
		launcherJob := &batchv1.Job{}
		key := client.ObjectKey{Namespace: namespace, Name: job.GetName() + "-launcher"}
		Eventually(ctx, func() error {
			if err := controller.Exited(); err != nil {
				StopTrying("mpi-operator is not running").Wrap(err).Now()
			}
			return env.Client.Get(ctx, key, launcherJob)
		}).WithTimeout(createTimeout).Should(Succeed())
		return launcherJob
	}

	It("runs sshd in every worker of a Flyte Horovod job with the annotation, and leaves the launcher alone", func(ctx SpecContext) {
		job := env.FlyteJob(namespace).Annotation(mutate.AnnotationTaskCustom, framework.FlytekitCustom).Obj()
		sent := job.DeepCopy()
		Expect(env.Client.Create(ctx, job)).To(Succeed())

		Expect(workerPods(ctx, job)).To(HaveEach(HaveField("Spec.Containers", ContainElement(And(
			HaveField("Name", "mpi"), HaveField("Command", Equal(framework.SSHD)), HaveField("Args", BeEmpty()),
		)))))
		Expect(launcher(ctx, job).Spec.Template.Spec.Containers).To(ContainElement(And(
			HaveField("Name", "mpi"), HaveField("Command", BeEmpty()), HaveField("Args", Equal(args(sent, "Launcher"))),
		)))
	})

	It("without the annotation, runs Flyte's copied task args in every worker instead of sshd", func(ctx SpecContext) {
		job := env.FlyteJob(namespace).Obj()
		sent := job.DeepCopy()
		Expect(env.Client.Create(ctx, job)).To(Succeed())

		taskArgs := args(sent, "Worker")
		Expect(taskArgs).To(ContainElement("pyflyte-execute"))
		Expect(workerPods(ctx, job)).To(HaveEach(HaveField("Spec.Containers", ContainElement(And(
			HaveField("Name", "mpi"), HaveField("Command", BeEmpty()), HaveField("Args", Equal(taskArgs)),
		)))))
	})
})

// args returns the args of the first container of one of job's replicas, as sent.
func args(job *unstructured.Unstructured, replica string) []string {
	GinkgoHelper()
	args, err := framework.ReplicaArgs(job, replica)
	Expect(err).NotTo(HaveOccurred())
	return args
}

// workerReplicas returns the number of workers job asks for, as the API server stored it.
func workerReplicas(job *unstructured.Unstructured) int {
	GinkgoHelper()
	replicas, err := framework.WorkerReplicas(job)
	Expect(err).NotTo(HaveOccurred())
	return replicas
}
