package cluster_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/certs"
)

// The install of gitopsSpecs: rendered with `helm template` as Argo CD
// renders a chart, applied with kubectl as a sync applies it, beside (not
// instead of) the Helm release of the other specs.
const (
	gitopsRelease   = "gitops"
	gitopsNamespace = "gitops-system"
	gitopsFullname  = gitopsRelease + "-flyte-mpi-webhook"
	// gitopsSettle is how long the specs keep creating jobs after each
	// step: more than the 10 s in which a replica reloads its certificate.
	gitopsSettle = 20 * time.Second
	// gitopsRotationTimeout bounds a CA's replacement: two steps of a
	// minute each (certs.DefaultGrace), and the writes between them.
	gitopsRotationTimeout = 5 * time.Minute
)

// gitopsSpecs install the release's chart with certificates.source=self as
// a GitOps sync does, two renders of the same values applied in a row, while
// Flyte MPIJobs are created, then force a renewal of the serving
// certificate and of the CA: no creation is refused, and the caBundle does
// not change with a sync. They need nothing of the specs before them but the
// cluster (they push the release's image to the registry themselves), so
// that `-ginkgo.label-filter=gitops` runs them alone.
func gitopsSpecs() {
	var (
		jobsNamespace string
		jobs          *creator
		renders       [2]string // the two renders' files
		caBundle      []byte    // the caBundle after the first sync
		phases        []string  // what each step saw, for the report
	)

	BeforeAll(func(ctx SpecContext) {
		// The image, in the registry as the README's skopeo copy puts it (again,
		// the same digest, when the install specs ran before).
		asReader(ctx, releaseFiles(imageTar()), "skopeo", "copy", "--all", "--preserve-digests",
			"oci-archive:"+imageTar(), "docker://"+imageRepository()+":"+releaseVersion)
		jobsNamespace = namespace(ctx)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gitopsNamespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
		}}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		// Not GinkgoT().TempDir(): its cleanup, registered after this one, would run first.
		dir, err := os.MkdirTemp("", "gitops-renders-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			if CurrentSpecReport().Failed() {
				dumpPods(ctx, gitopsNamespace)
			}
			for _, render := range renders {
				if render != "" {
					run(ctx, 3*time.Minute, env("KUBECTL"), "delete", "--ignore-not-found", "--wait", "-f", render)
					break
				}
			}
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ns))).To(Succeed())
			awaitNamespaceGone(ctx, gitopsNamespace)
			Expect(os.RemoveAll(dir)).To(Succeed())
		})
		for i := range renders {
			renders[i] = gitopsRender(ctx, dir, jobsNamespace)
		}
	})

	AfterAll(func() {
		if jobs != nil {
			jobs.finish()
		}
		fmt.Fprintf(GinkgoWriter, "GitOps install, certificates.source self:\n  %s\n", strings.Join(phases, "\n  "))
	})

	It("renders the same bytes twice, with no key and no caBundle", func() {
		first, err := os.ReadFile(renders[0])
		Expect(err).NotTo(HaveOccurred())
		second, err := os.ReadFile(renders[1])
		Expect(err).NotTo(HaveOccurred())
		Expect(bytes.Equal(first, second)).To(BeTrue(), "two renders of the same values differ")
		Expect(string(first)).NotTo(ContainSubstring("-----BEGIN"))
		Expect(string(first)).NotTo(ContainSubstring("LS0tLS1CRUdJTi"))
		Expect(string(first)).NotTo(ContainSubstring("caBundle:"))
	})

	It("applied (kubectl apply, as Argo CD syncs): both replicas Ready under Pod Security restricted, "+
		"once they have filled the Secret and the caBundle", func(ctx SpecContext) {
		start := time.Now()
		run(ctx, 2*time.Minute, env("KUBECTL"), "apply", "-f", renders[0])
		awaitGitopsReplicas(ctx)
		var secret map[string][]byte
		caBundle, secret = gitopsCertificates(ctx)
		Expect(secret).To(HaveKey(certs.KeyCAKey))
		Expect(secret).To(HaveKey(certs.KeyCert))
		phases = append(phases, fmt.Sprintf("first sync: both replicas Ready %s after kubectl apply", time.Since(start).Round(time.Second)))
		jobs = startCreating(jobsNamespace)
		time.Sleep(gitopsSettle)
		expectGitopsDecisions(ctx)
	})

	It("applied again, client-side as Argo CD and server-side as Flux: the caBundle and the Secret unchanged, no creation refused",
		func(ctx SpecContext) {
			_, before := gitopsCertificates(ctx)
			for _, apply := range [][]string{
				{"apply", "-f", renders[1]},
				{"apply", "--server-side", "--force-conflicts", "--field-manager=kustomize-controller", "-f", renders[1]},
			} {
				out := run(ctx, 2*time.Minute, env("KUBECTL"), apply...)
				fmt.Fprintf(GinkgoWriter, "$ kubectl %s\n%s", strings.Join(apply, " "), out)
				time.Sleep(gitopsSettle)
				gotCABundle, got := gitopsCertificates(ctx)
				Expect(gotCABundle).To(Equal(caBundle), "kubectl %s changed the caBundle", strings.Join(apply, " "))
				Expect(got).To(Equal(before), "kubectl %s changed the webhook's Secret", strings.Join(apply, " "))
				awaitGitopsReplicas(ctx)
			}
			outcomes := jobs.created()
			expectAllAdmittedWithCommand(outcomes)
			phases = append(phases, fmt.Sprintf("through both syncs: %d creations, none refused, the caBundle unchanged", len(outcomes)))
		})

	It("renews its serving certificate, then replaces its CA, when forced, with no creation refused", func(ctx SpecContext) {
		_, before := gitopsCertificates(ctx)
		start := time.Now()
		removeSecretKey(ctx, certs.KeyCert)
		Eventually(ctx, func(g Gomega) {
			bundle, data := gitopsCertificates(ctx)
			g.Expect(data[certs.KeyCert]).NotTo(BeEmpty())
			g.Expect(data[certs.KeyCert]).NotTo(Equal(before[certs.KeyCert]))
			g.Expect(bundle).To(Equal(caBundle), "a serving certificate's renewal changed the caBundle")
		}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
		phases = append(phases, fmt.Sprintf("tls.crt deleted: a new serving certificate in the Secret after %s, the caBundle unchanged",
			time.Since(start).Round(time.Second)))
		time.Sleep(gitopsSettle)

		start = time.Now()
		removeSecretKey(ctx, certs.KeyCAKey)
		var both time.Duration
		Eventually(ctx, func(g Gomega) {
			bundle, data := gitopsCertificates(ctx)
			cas := certs.CAs(data[certs.KeyCA])
			if len(cas) == 2 && both == 0 {
				both = time.Since(start)
			}
			g.Expect(cas).To(HaveLen(1))
			g.Expect(data[certs.KeyCA]).NotTo(Equal(caBundle))
			g.Expect(bundle).To(Equal(data[certs.KeyCA]))
			g.Expect(signedBy(data[certs.KeyCert], cas[0])).To(Succeed())
		}).WithTimeout(gitopsRotationTimeout).WithPolling(poll).Should(Succeed())
		phases = append(phases, fmt.Sprintf("ca.key deleted: two CAs in the caBundle after %s, the new one alone after %s",
			both.Round(time.Second), time.Since(start).Round(time.Second)))
		time.Sleep(gitopsSettle)
		awaitGitopsReplicas(ctx)

		outcomes := jobs.finish()
		jobs = nil
		expectAllAdmittedWithCommand(outcomes)
		expectGitopsDecisions(ctx)
		phases = append(phases, fmt.Sprintf("from the first sync to the end: %d creations, none refused", len(outcomes)))
		for _, pod := range gitopsPods(ctx) {
			Expect(pod.Status.ContainerStatuses[0].RestartCount).To(BeZero(), pod.Name)
		}
	})
}

// gitopsRender renders the release's chart with `helm template`, as Argo
// CD renders an Application's chart, with certificates.source=self and the
// webhook called for jobsNamespace alone, into a file of its own in dir.
func gitopsRender(ctx context.Context, dir, jobsNamespace string) string {
	GinkgoHelper()
	version, err := clientset.Discovery().ServerVersion()
	Expect(err).NotTo(HaveOccurred())
	// --no-hooks: Argo CD applies only the hooks gitops-engine maps (pre- and post-install and
	// -upgrade), not the chart's helm test Pod nor its pre-delete Job; applied as plain objects, the
	// Job would delete the webhook configuration at once.
	out := run(ctx, time.Minute, helmBinary, "template", gitopsRelease, filepath.Join(releaseDir, chartFile()),
		"--namespace", gitopsNamespace, "--kube-version", version.GitVersion, "--no-hooks",
		"--set", "image.repository="+imageRepository(), "--set", "image.digest="+releasedDigest(),
		"--set", "certificates.source=self",
		"--set", "webhook.namespaceSelectorExpressions[0].key=kubernetes.io/metadata.name",
		"--set", "webhook.namespaceSelectorExpressions[0].operator=In",
		"--set", "webhook.namespaceSelectorExpressions[0].values[0]="+jobsNamespace)
	f, err := os.CreateTemp(dir, "render-*.yaml")
	Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString(out)
	Expect(err).NotTo(HaveOccurred())
	Expect(f.Close()).To(Succeed())
	return f.Name()
}

// gitopsCertificates returns the caBundle of the install's configuration,
// once it is the Secret's ca.crt, and the Secret's data.
func gitopsCertificates(ctx context.Context) ([]byte, map[string][]byte) {
	GinkgoHelper()
	var bundle []byte
	secret := &corev1.Secret{}
	Eventually(ctx, func(g Gomega) {
		hooks := &admissionregistrationv1.MutatingWebhookConfiguration{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: gitopsFullname + "-mutating-webhook-configuration"}, hooks)).To(Succeed())
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: gitopsNamespace, Name: gitopsFullname + "-webhook-certs"}, secret)).To(Succeed())
		g.Expect(hooks.Webhooks).NotTo(BeEmpty())
		bundle = hooks.Webhooks[0].ClientConfig.CABundle
		g.Expect(bundle).NotTo(BeEmpty())
		g.Expect(bundle).To(Equal(secret.Data[certs.KeyCA]))
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
	return bundle, secret.Data
}

// removeSecretKey removes key from the install's Secret, as an
// administrator forcing a renewal does (the chart's README).
func removeSecretKey(ctx context.Context, key string) {
	GinkgoHelper()
	run(ctx, time.Minute, env("KUBECTL"), "-n", gitopsNamespace, "patch", "secret", gitopsFullname+"-webhook-certs",
		"--type=json", "-p", `[{"op":"remove","path":"/data/`+strings.ReplaceAll(key, "/", "~1")+`"}]`)
}

// gitopsPods returns the install's webhook Pods that are not terminating.
func gitopsPods(ctx context.Context) []corev1.Pod {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(k8sClient.List(ctx, &pods, client.InNamespace(gitopsNamespace),
		client.MatchingLabels{"app.kubernetes.io/instance": gitopsRelease})).To(Succeed())
	var alive []corev1.Pod
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil {
			alive = append(alive, pod)
		}
	}
	return alive
}

// awaitGitopsReplicas waits until the install's Deployment has both its Pods Ready.
func awaitGitopsReplicas(ctx context.Context) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		deployment := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: gitopsNamespace, Name: gitopsFullname + "-webhook-server"}, deployment)).To(Succeed())
		g.Expect(deployment.Status.ObservedGeneration).To(Equal(deployment.Generation))
		g.Expect(deployment.Status.ReadyReplicas).To(BeEquivalentTo(replicas))
		ready := 0
		for _, pod := range gitopsPods(ctx) {
			if podReady(pod) {
				ready++
			}
		}
		g.Expect(ready).To(Equal(replicas))
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// expectGitopsDecisions checks that the install's own webhook decided on
// the jobs of the spec (the Helm release's, when installed, is called for
// them too): its Pods' logs hold a decision for that namespace.
func expectGitopsDecisions(ctx context.Context) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		decided := 0
		for _, pod := range gitopsPods(ctx) {
			logs, err := clientset.CoreV1().Pods(gitopsNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			// Any outcome: where the Helm release's webhook, called first, has stored the command
			// already, this one leaves the job unchanged.
			decided += strings.Count(string(logs), `"outcome":"`)
		}
		g.Expect(decided).To(BeNumerically(">", 0), "the install's webhook logged no decision")
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// signedBy fails unless the PEM certificate certPEM is ca's.
func signedBy(certPEM []byte, ca *x509.Certificate) error {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return fmt.Errorf("no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	return leaf.CheckSignatureFrom(ca)
}
