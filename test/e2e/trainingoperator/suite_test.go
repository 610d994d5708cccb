// Package trainingoperator_test runs training-operator's controller, with
// only its MPIJob scheme (kubeflow.org/v1), against an API server with the
// webhook, and checks the Pods it creates for the jobs Flyte creates. make
// test-e2e runs it once per release, v1.8 and v1.9, each with its own CRD:
// $TRAINING_OPERATOR_BIN and $TRAINING_OPERATOR_VERSION say which.
package trainingoperator_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/e2e/operator"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

func TestTrainingOperator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "e2e training-operator "+version+" kubeflow.org/v1")
}

// version is the release of the controller under test, as the Makefile sets it.
var version = os.Getenv("TRAINING_OPERATOR_VERSION")

// InjectAsArgsLabel sends a Flyte MPIJob to a webhook server that runs with
// --inject-as=args, Flyte's old behaviour; every other job goes to the
// default, --inject-as=command.
const InjectAsArgsLabel = "test.mpi.flyte.org/inject-as-args"

// operatorNamespace is training-operator's own namespace ($MY_POD_NAMESPACE),
// which holds the Secret for its webhook certificate.
const operatorNamespace = "training-operator"

// Where training-operator v1.8.1 and v1.9.4 keep their webhook certificate
// (pkg/cert, open-policy-agent's cert-controller): the Secret each fills at
// start, and the directory, a constant in their code, where a kubelet would
// mount that Secret. Each waits for the files before it starts its
// controllers, and neither needs its ValidatingWebhookConfiguration to exist.
const (
	certSecret = "training-operator-webhook-cert"
	certDir    = "/tmp/k8s-webhook-server/serving-certs"
)

// What training-operator v1.8.1 and v1.9.4 (pkg/controller.v1/mpi) give the
// first container of a replica, the one they treat as the MPI container.
var (
	// sleep and sleepArgs are what a worker runs whose first container has no command.
	sleep, sleepArgs = []string{"sleep"}, []string{"365d"}
	// configMount is the kubexec.sh (and, for the launcher, hostfile)
	// ConfigMap, mounted into the first container of every replica.
	configMount = corev1.VolumeMount{Name: "mpi-job-config", MountPath: "/etc/mpi"}
	// kubectlMount holds the kubectl that the launcher's kubexec.sh runs.
	kubectlMount = corev1.VolumeMount{Name: "mpi-job-kubectl", MountPath: "/opt/kube"}
	// launcherEnv is what the launcher's first container gets, without GPUs.
	launcherEnv = []corev1.EnvVar{
		{Name: "OMPI_MCA_plm_rsh_agent", Value: "/etc/mpi/kubexec.sh"},
		{Name: "OMPI_MCA_orte_default_hostfile", Value: "/etc/mpi/hostfile"},
		{Name: "NVIDIA_VISIBLE_DEVICES"},
		{Name: "NVIDIA_DRIVER_CAPABILITIES"},
		{Name: "I_MPI_HYDRA_BOOTSTRAP", Value: "rsh"},
		{Name: "I_MPI_HYDRA_BOOTSTRAP_EXEC", Value: "/etc/mpi/kubexec.sh"},
	}
)

var cluster = &operator.Cluster{}

var _ = BeforeSuite(func(ctx SpecContext) {
	Expect(version).NotTo(BeEmpty(), "TRAINING_OPERATOR_VERSION is not set: run the suite with `make test-e2e`")
	binary, err := operator.Binary("TRAINING_OPERATOR_BIN")
	Expect(err).NotTo(HaveOccurred())
	cluster.Env, err = framework.Start(ctx, "v1")
	Expect(err).NotTo(HaveOccurred())
	injectArgs := mutate.DefaultOptions()
	injectArgs.InjectAs = mutate.InjectArgs
	Expect(cluster.Env.ServeLabelled(ctx, InjectAsArgsLabel, injectArgs)).To(Succeed())

	c := cluster.Env.Client
	Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: certSecret}}
	Expect(c.Create(ctx, secret)).To(Succeed())

	webhookPort, err := framework.FreePort("127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	cluster.StartController("training-operator", binary, []string{"MY_POD_NAMESPACE=" + operatorNamespace},
		func(kubeconfig string) []string {
			return []string{"--kubeconfig", kubeconfig, "--enable-scheme", "mpijob", "--leader-elect=false",
				"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
				"--webhook-server-port", strconv.Itoa(webhookPort)}
		})

	// Play the kubelet: mount the certificate the controller wrote into its Secret.
	cluster.Await(ctx, func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
		g.Expect(secret.Data).To(HaveKey(corev1.TLSCertKey))
	})
	if _, err := os.Stat(certDir); errors.Is(err, fs.ErrNotExist) {
		// Best effort: leave the directories as they were, unless another process wrote into them meanwhile.
		DeferCleanup(func() { _ = os.Remove(certDir); _ = os.Remove(filepath.Dir(certDir)) })
	}
	Expect(os.MkdirAll(certDir, 0o700)).To(Succeed())
	for name, content := range secret.Data {
		path := filepath.Join(certDir, name)
		Expect(os.WriteFile(path, content, 0o600)).To(Succeed())
		// The directory is every training-operator's (and every controller-runtime
		// webhook's default): another one on this machine may have removed the file.
		DeferCleanup(func() error {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		})
	}
}, NodeTimeout(framework.StartTimeout))

var _ = AfterSuite(cluster.Stop)

var _ = Describe("training-operator "+version, func() {
	var namespace string

	BeforeEach(func(ctx SpecContext) {
		namespace = cluster.Namespace(ctx)
	})

	It("with --inject-as=command, the default, runs sshd in every worker, and leaves the launcher alone", func(ctx SpecContext) {
		job := cluster.Env.Job(namespace, fixtures.HorovodTaskAnnotations).Obj()
		sent := cluster.Create(ctx, job)

		Expect(pods(ctx, job, "worker")).To(HaveEach(operator.Runs(fixtures.SSHD, nil)))
		Expect(pods(ctx, job, "launcher")).To(HaveEach(operator.Runs(nil, operator.Args(sent, "Launcher"))))
	})

	It("with --inject-as=args, Flyte's old behaviour, replaces the worker command with `sleep 365d`", func(ctx SpecContext) {
		job := cluster.Env.Job(namespace, fixtures.HorovodTaskAnnotations).Label(InjectAsArgsLabel, "true").Obj()
		cluster.Create(ctx, job)
		// The webhook did inject sshd, as args; the controller throws it away.
		Expect(operator.Containers(job, "Worker")).To(HaveExactElements(And(
			HaveField("Name", "mpi"), HaveField("Command", BeEmpty()), HaveField("Args", Equal(fixtures.SSHD)))))

		Expect(pods(ctx, job, "worker")).To(HaveEach(operator.Runs(sleep, sleepArgs)))
	})

	It("without the annotation, replaces Flyte's copied task args in every worker with `sleep 365d`", func(ctx SpecContext) {
		job := cluster.Env.Job(namespace, fixtures.HorovodNoWorkerCommand).Obj()
		cluster.Create(ctx, job)
		Expect(operator.Args(job, "Worker")).To(ContainElement("pyflyte-execute"))

		Expect(pods(ctx, job, "worker")).To(HaveEach(operator.Runs(sleep, sleepArgs)))
	})

	// The jobs of tasks that declare their worker command, as Flyte creates
	// them: with no annotation, the declaration is in the Worker's args.
	DescribeTable("a Flyte-built job whose task declares its worker command, with no annotation",
		func(ctx SpecContext, name string, hooked bool, command, args []string) {
			sent, job := cluster.CreateDeclared(ctx, namespace, name, hooked)
			Expect(pods(ctx, job, "worker")).To(HaveEach(operator.Runs(command, args)))
			Expect(pods(ctx, job, "launcher")).To(HaveEach(operator.Runs(nil, operator.Args(sent, "Launcher"))))
		},
		Entry("Worker(command=sshd…): the webhook makes the args the command, and every worker runs sshd",
			fixtures.HorovodWorkerCommand, true, fixtures.SSHD, nil),
		Entry("Worker(command=sshd…) without the webhook: every worker runs `sleep 365d`",
			fixtures.HorovodWorkerCommand, false, sleep, sleepArgs),
		Entry("Worker(command=sshd…), fast-registered: every worker runs sshd",
			fixtures.HorovodFastRegisterWorkerCommand, true, fixtures.SSHD, nil),
		Entry("a v0 task's worker_spec_command: every worker runs sshd",
			fixtures.LegacyWorkerSpecCommand, true, fixtures.SSHD, nil),
		Entry("a v0 task's worker_spec_command without the webhook: every worker runs `sleep 365d`",
			fixtures.LegacyWorkerSpecCommand, false, sleep, sleepArgs),
	)

	// A pod template that lists a sidecar before the task's container puts it
	// first in both replicas. training-operator treats the first container of
	// each as the MPI container (newWorker, newLauncher): so does the webhook.
	It("with a sidecar before the mpi container, runs sshd in the sidecar, which the controller treats as the MPI container", func(ctx SpecContext) {
		sent, job := cluster.CreateWithSidecar(ctx, namespace)

		// The webhook gives the sidecar the command; the mpi container keeps
		// the task args Flyte copied, which no operator looks at.
		worker := operator.Project(operator.Containers(sent, "Worker"))
		worker[0].Command = fixtures.SSHD
		worker[0].VolumeMounts = append(worker[0].VolumeMounts, configMount)
		for _, pod := range pods(ctx, job, "worker") {
			Expect(operator.Project(pod.Spec.Containers)).To(Equal(worker), "worker Pod %s", pod.Name)
		}

		launcher := operator.Project(operator.Containers(sent, "Launcher"))
		launcher[0].Env = append(launcher[0].Env, launcherEnv...)
		launcher[0].VolumeMounts = append(launcher[0].VolumeMounts, kubectlMount, configMount)
		for _, pod := range pods(ctx, job, "launcher") {
			Expect(operator.Project(pod.Spec.Containers)).To(Equal(launcher), "launcher Pod %s", pod.Name)
		}
	})
})

// pods waits for the controller to create the Pods of one replica type
// (worker, launcher) of job, as the API server stored it, and returns them.
func pods(ctx context.Context, job *unstructured.Unstructured, replicaType string) []corev1.Pod {
	GinkgoHelper()
	count := 1
	if replicaType == "worker" {
		count = operator.WorkerCount(job)
	}
	return cluster.Pods(ctx, job.GetNamespace(), map[string]string{
		"training.kubeflow.org/job-name":     job.GetName(),
		"training.kubeflow.org/replica-type": replicaType,
	}, count)
}
