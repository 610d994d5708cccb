// Package cluster_test runs on the real single-node cluster that
// test/cluster/cluster.sh starts (make test-cluster): a kubelet runs the
// Pods; the add-on is installed from make release's artifacts, pushed to the
// cluster's registry, with the README's own commands (install_test.go), once
// the README's cosign commands have verified it there (verify_test.go); the
// training-operator v1.8.1, then v1.9.4, runs the MPIJobs, and Flyte's own
// backend (test/flyte's flyte-backend launch) creates them. The verdict on a
// job is its MPIJob's Succeeded condition. Flyte's own controller,
// flytepropeller, runs workflows on the cluster too, whose verdict is what
// Flyte shows (flyte_test.go). Last, mpi-operator v0.8.2 replaces the
// training-operator and runs kubeflow.org/v2beta1 jobs derived from Flyte's,
// whose launcher reaches the workers over SSH (mpioperator_test.go).
package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
)

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "a real single-node cluster (make test-cluster)")
}

// What make test-cluster gives the suite, from the environment.
var (
	// kubeconfig is the cluster's, with a client certificate of system:masters.
	kubeconfig string
	// flyteBackend is test/flyte's binary, flyte-backend, whose launch runs Flyte's backend.
	flyteBackend string
	// helmBinary is the Helm CLI that installs the chart.
	helmBinary string
	// cosignBinary is the cosign CLI that signs the release (make publish) and verifies it (verify_test.go).
	cosignBinary string
	// releaseDir holds make release's artifacts of releaseVersion: the image
	// tarball (and the .ref make image wrote beside it), the chart, the one-file installs.
	releaseDir, releaseVersion string
	// sourceDir is the checkout, whose config/ the kustomize overlay builds on, and whose README.md gives the commands.
	sourceDir string
	// registry is the cluster's registry, HOST:PORT, whose certificate registryCA signs.
	registry, registryCA string
	// readme is the README's install commands.
	readme installSnippets
	// reader is the environment the README's commands run in (readerEnv).
	reader []string
)

var (
	k8sClient client.Client
	clientset *kubernetes.Clientset
)

// env returns the environment variable name, failing the suite when it is unset.
func env(name string) string {
	GinkgoHelper()
	value := os.Getenv(name)
	Expect(value).NotTo(BeEmpty(), "%s is not set: run the suite with `make test-cluster`", name)
	return value
}

var _ = BeforeSuite(func() {
	kubeconfig = env("KUBECONFIG")
	flyteBackend = env("FLYTE_BACKEND_BIN")
	propellerBinary, propellerLog = env("PROPELLER_BIN"), env("PROPELLER_LOG")
	patchedPropellerBinary = env("PATCHED_PROPELLER_BIN")
	helmBinary = env("HELM")
	cosignBinary = env("COSIGN")
	releaseDir, releaseVersion = env("RELEASE_DIR"), env("RELEASE_VERSION")
	sourceDir = env("SOURCE_DIR")
	registry, registryCA = env("REGISTRY"), env("REGISTRY_CA")
	readme = readInstallSnippets(filepath.Join(sourceDir, "README.md"))
	reader = readerEnv()
	cfg, err := config.GetConfig()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
})

// run runs name with args, within timeout, and returns its standard output;
// it fails the spec, with standard error, when the command fails.
func run(ctx context.Context, timeout time.Duration, name string, args ...string) string {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	Expect(cmd.Run()).To(Succeed(), "%s %v:\n%s%s", filepath.Base(name), args, &stdout, &stderr)
	return stdout.String()
}

// namespace creates a namespace for one spec, and deletes it when the spec ends.
func namespace(ctx context.Context) string {
	GinkgoHelper()
	ns := &corev1.Namespace{}
	ns.GenerateName = "cluster-"
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	// The controller-manager gives a new namespace its default ServiceAccount,
	// without which no Pod is admitted there.
	Eventually(ctx, func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
	}).WithTimeout(time.Minute).Should(Succeed())
	DeferCleanup(func(ctx context.Context) {
		if CurrentSpecReport().Failed() {
			dumpPods(ctx, ns.Name)
		}
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ns))).To(Succeed())
	})
	return ns.Name
}

// dumpPods writes the Pods of namespace, their state and the end of their
// containers' logs, to the spec's output: where a failed spec's reason is.
func dumpPods(ctx context.Context, namespace string) {
	var pods corev1.PodList
	if err := k8sClient.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		fmt.Fprintf(GinkgoWriter, "listing the Pods of %s: %v\n", namespace, err)
		return
	}
	tail := int64(30)
	for _, pod := range pods.Items {
		status, _ := json.MarshalIndent(pod.Status.ContainerStatuses, "", "  ")
		fmt.Fprintf(GinkgoWriter, "Pod %s/%s: %s\n%s\n", namespace, pod.Name, pod.Status.Phase, status)
		for _, container := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			logs, err := clientset.CoreV1().Pods(namespace).GetLogs(pod.Name,
				&corev1.PodLogOptions{Container: container.Name, TailLines: &tail}).DoRaw(ctx)
			fmt.Fprintf(GinkgoWriter, "--- %s/%s log (err %v):\n%s\n", pod.Name, container.Name, err, logs)
		}
	}
}
