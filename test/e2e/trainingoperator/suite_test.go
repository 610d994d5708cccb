// Package trainingoperator_test runs training-operator's controller, with
// only its MPIJob scheme (kubeflow.org/v1), against an API server with the
// webhook, and checks the worker Pods it creates.
package trainingoperator_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive // Ginkgo's DSL
	. "github.com/onsi/gomega"    //nolint:revive // Gomega's DSL
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/e2e/operator"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
)

func TestTrainingOperator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "e2e training-operator kubeflow.org/v1")
}

// InjectAsArgsLabel sends a Flyte MPIJob to a webhook server that runs with
// --inject-as=args, Flyte's old behaviour; every other job goes to the
// default, --inject-as=command.
const InjectAsArgsLabel = "test.mpi.flyte.org/inject-as-args"

// operatorNamespace is training-operator's own namespace ($MY_POD_NAMESPACE),
// which holds the Secret for its webhook certificate.
const operatorNamespace = "training-operator"

// Where training-operator v1.8.1 keeps its webhook certificate: the Secret it
// fills at start, and the directory, a constant in its code, where a kubelet
// would mount that Secret. It waits for the files before it starts its controllers.
const (
	certSecret = "training-operator-webhook-cert"
	certDir    = "/tmp/k8s-webhook-server/serving-certs"
)

// createTimeout bounds the wait for the controller to create a job's Pods,
// its start included.
const createTimeout = 2 * time.Minute

// sleep is what training-operator runs in a worker whose container has no command.
var sleep = []string{"sleep"}

var (
	env        *framework.Env
	controller *operator.Process
)

var _ = BeforeSuite(func(ctx SpecContext) {
	binary, err := operator.Binary("TRAINING_OPERATOR_BIN")
	Expect(err).NotTo(HaveOccurred())
	env, err = framework.Start(ctx, "v1")
	Expect(err).NotTo(HaveOccurred())
	injectArgs := mutate.DefaultOptions()
	injectArgs.InjectAs = mutate.InjectArgs
	Expect(env.ServeLabelled(ctx, InjectAsArgsLabel, injectArgs)).To(Succeed())

	Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: certSecret}}
	Expect(env.Client.Create(ctx, secret)).To(Succeed())

	dir := GinkgoT().TempDir()
	kubeconfig, err := env.WriteKubeConfig(dir)
	Expect(err).NotTo(HaveOccurred())
	webhookPort, err := framework.FreePort("127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	controller, err = operator.Start("training-operator", binary, kubeconfig, dir,
		[]string{"MY_POD_NAMESPACE=" + operatorNamespace},
		"--kubeconfig", kubeconfig, "--enable-scheme", "mpijob", "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--webhook-server-port", strconv.Itoa(webhookPort))
	Expect(err).NotTo(HaveOccurred())

	// Play the kubelet: mount the certificate the controller wrote into its Secret.
	Eventually(ctx, func(g Gomega) {
		if err := controller.Exited(); err != nil {
			StopTrying("training-operator is not running").Wrap(err).Now()
		}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
		g.Expect(secret.Data).To(HaveKey(corev1.TLSCertKey))
	}).Should(Succeed())
	if _, err := os.Stat(certDir); errors.Is(err, fs.ErrNotExist) {
		// Best effort: leave the directories as they were, unless another process wrote into them meanwhile.
		DeferCleanup(func() { _ = os.Remove(certDir); _ = os.Remove(filepath.Dir(certDir)) })
	}
	Expect(os.MkdirAll(certDir, 0o700)).To(Succeed())
	for name, content := range secret.Data {
		path := filepath.Join(certDir, name)
		Expect(os.WriteFile(path, content, 0o600)).To(Succeed())
		DeferCleanup(os.Remove, path)
	}
}, NodeTimeout(framework.StartTimeout))

var _ = AfterSuite(func() {
	if controller != nil {
		Expect(controller.Stop()).To(Succeed())
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

var _ = Describe("training-operator v1.8.1", func() {
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
			fmt.Fprintf(GinkgoWriter, "training-operator's log ends with:\n%s\n", controller.LogTail(60))
		}
	})

	// pods waits for the controller to create the Pods of one replica type
	// (worker, launcher) of job, as the API server stored it, and returns them.
	pods := func(ctx context.Context, job *unstructured.Unstructured, replicaType string, count int) []corev1.Pod {
		GinkgoHelper()
		var pods []corev1.Pod
		Eventually(ctx, func(g Gomega) {
			if err := controller.Exited(); err != nil {
				StopTrying("training-operator is not running").Wrap(err).Now()
			}
			var err error
			pods, err = operator.Pods(ctx, env.Client, namespace, map[string]string{
				"training.kubeflow.org/job-name":     job.GetName(),
				"training.kubeflow.org/replica-type": replicaType,
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods).To(HaveLen(count))
		}).WithTimeout(createTimeout).Should(Succeed())
		return pods
	}

	It("with --inject-as=command, the default, runs sshd in every worker, and leaves the launcher alone", func(ctx SpecContext) {
		job := env.FlyteJob(namespace).Annotation(mutate.AnnotationTaskCustom, framework.FlytekitCustom).Obj()
		sent := job.DeepCopy()
		Expect(env.Client.Create(ctx, job)).To(Succeed())

		Expect(pods(ctx, job, "worker", workerReplicas(job))).To(HaveEach(HaveField("Spec.Containers", ContainElement(And(
			HaveField("Name", "mpi"), HaveField("Command", Equal(framework.SSHD)), HaveField("Args", BeEmpty()),
		)))))
		Expect(pods(ctx, job, "launcher", 1)).To(HaveEach(HaveField("Spec.Containers", ContainElement(And(
			HaveField("Name", "mpi"), HaveField("Command", BeEmpty()), HaveField("Args", Equal(args(sent, "Launcher"))),
		)))))
	})

	It("with --inject-as=args, Flyte's old behaviour, replaces the worker command with `sleep 365d`", func(ctx SpecContext) {
		job := env.FlyteJob(namespace).Label(InjectAsArgsLabel, "true").
			Annotation(mutate.AnnotationTaskCustom, framework.FlytekitCustom).Obj()
		Expect(env.Client.Create(ctx, job)).To(Succeed())
		// The webhook did inject sshd, as args; the controller throws it away.
		Expect(framework.WorkerContainers(job)).To(HaveExactElements(And(
			HaveKeyWithValue("name", "mpi"), HaveKeyWithValue("args", framework.AnyList(framework.SSHD)), Not(HaveKey("command")),
		)))

		Expect(pods(ctx, job, "worker", workerReplicas(job))).To(HaveEach(HaveField("Spec.Containers", ContainElement(And(
			HaveField("Name", "mpi"), HaveField("Command", Equal(sleep)), HaveField("Args", Equal([]string{"365d"})),
		)))))
	})

	It("without the annotation, replaces Flyte's copied task args in every worker with `sleep 365d`", func(ctx SpecContext) {
		job := env.FlyteJob(namespace).Obj()
		sent := job.DeepCopy()
		Expect(env.Client.Create(ctx, job)).To(Succeed())
		Expect(args(sent, "Worker")).To(ContainElement("pyflyte-execute"))

		Expect(pods(ctx, job, "worker", workerReplicas(job))).To(HaveEach(HaveField("Spec.Containers", ContainElement(And(
			HaveField("Name", "mpi"), HaveField("Command", Equal(sleep)), HaveField("Args", Equal([]string{"365d"})),
		)))))
	})
})

// args returns the args of the first container of one of job's replicas.
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
