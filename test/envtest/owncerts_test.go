package envtest_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/certs"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// ownCertificatesLabel sends a Flyte MPIJob to the server that keeps its
// certificates itself.
const ownCertificatesLabel = "test.mpi.flyte.org/own-certificates"

// ownCertificatesRules are the RBAC rules of the chart's
// certificates.source=self (templates/manager/rbac.yaml), which test/helm
// holds the rendering to: the Secret, and the configuration, by name.
func ownCertificatesRules(secret, configuration string) (namespaced, cluster []rbacv1.PolicyRule) {
	verbs := []string{"get", "list", "watch", "update"}
	return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: verbs}},
		[]rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
			ResourceNames: []string{configuration}, Verbs: verbs}}
}

// describeOwnCertificates declares the specs of the webhook run with
// --cert-secret, as the chart's certificates.source=self runs it: an empty
// Secret, the chart's RBAC and nothing more, a configuration with no caBundle.
func describeOwnCertificates(s *spec) bool {
	return Describe("with --cert-secret, its own CA and certificate, under the chart's RBAC alone", Ordered, func() {
		const namespace, secretName, user = "own-certificates", "webhook-certs", "own-certificates-webhook"
		var (
			own        *framework.OwnCertificates
			restConfig *rest.Config
			secret     = types.NamespacedName{Namespace: namespace, Name: secretName}
		)
		config := certs.Config{Secret: namespace + "/" + secretName, DNSNames: []string{framework.OwnCertificatesHost},
			CAValidity: certs.DefaultCAValidity, Validity: certs.DefaultValidity, Grace: 2 * time.Second}

		BeforeAll(func(ctx SpecContext) {
			c := s.env.Client
			config.Configuration = s.env.Webhook.Name + "-own-certificates"
			Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
			// As the chart renders it: empty, so that the webhook needs no create.
			Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: secretName}})).To(Succeed())
			namespaced, cluster := ownCertificatesRules(secretName, config.Configuration)
			subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
			meta := metav1.ObjectMeta{Namespace: namespace, Name: "webhook-certificates"}
			Expect(c.Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: namespaced})).To(Succeed())
			Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: meta.Name}})).To(Succeed())
			meta = metav1.ObjectMeta{Name: "own-certificates-webhook-certificates"}
			Expect(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: cluster})).To(Succeed())
			Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: meta.Name}})).To(Succeed())

			var err error
			restConfig, err = s.env.UserConfig(user)
			Expect(err).NotTo(HaveOccurred())
			own, err = s.env.ServeOwnCertificates(ctx, ownCertificatesLabel, restConfig, config)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(own.Stop)
		})

		It("fills the Secret and the caBundle, turns Ready, and the API server calls it", func(ctx SpecContext) {
			Eventually(func(g Gomega) {
				stored := s.create(ctx, s.job(fixtures.HorovodWorkerCommand).Label(ownCertificatesLabel, "true").Obj())
				expectWorker(stored, fixtures.SSHD, mutate.SourceFlyteWorkerArgs)
			}).WithContext(ctx).WithTimeout(framework.ServeTimeout).Should(Succeed())

			data := secretData(ctx, s, secret)
			Expect(data).To(HaveKey(certs.KeyCA))
			Expect(data).To(HaveKey(certs.KeyCAKey))
			Expect(data).To(HaveKey(certs.KeyCert))
			Expect(data).To(HaveKey(certs.KeyKey))
			Expect(caBundle(ctx, s, own.Configuration)).To(Equal(data[certs.KeyCA]))
			Eventually(ready).WithArguments(own.ProbeAddress).WithTimeout(framework.ServeTimeout).Should(Succeed())
		})

		It("may read no other Secret, nor list Secrets or configurations without naming its own", func(ctx SpecContext) {
			c, err := client.New(restConfig, client.Options{})
			Expect(err).NotTo(HaveOccurred())
			Expect(c.List(ctx, &corev1.SecretList{}, client.InNamespace(namespace))).To(Satisfy(apierrors.IsForbidden))
			Expect(c.List(ctx, &admissionregistrationv1.MutatingWebhookConfigurationList{})).To(Satisfy(apierrors.IsForbidden))
			Expect(c.Get(ctx, types.NamespacedName{Name: s.env.Webhook.Name}, &admissionregistrationv1.MutatingWebhookConfiguration{})).
				To(Satisfy(apierrors.IsForbidden))
			Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "another"}})).
				To(Satisfy(apierrors.IsForbidden))
		})

		It("refuses no job through a forced renewal of the serving certificate, and of the CA", func(ctx SpecContext) {
			before := secretData(ctx, s, secret)
			calls := startCalls(s, own.ProbeAddress)

			By("deleting tls.crt: a new serving certificate from the same CA, the caBundle as it was")
			patchSecret(ctx, s, secret, certs.KeyCert)
			Eventually(func(g Gomega) {
				data := secretData(ctx, s, secret)
				g.Expect(data[certs.KeyCert]).NotTo(Equal(before[certs.KeyCert]))
				g.Expect(data[certs.KeyCA]).To(Equal(before[certs.KeyCA]))
			}).WithContext(ctx).WithTimeout(framework.ServeTimeout).Should(Succeed())
			Expect(caBundle(ctx, s, own.Configuration)).To(Equal(before[certs.KeyCA]))
			calls.expectMore(3 * config.Grace) // calls with the new certificate

			By("deleting ca.key: a new CA, both in the caBundle, the serving certificate moved to it, the old CA dropped")
			patchSecret(ctx, s, secret, certs.KeyCAKey)
			var newCA []byte
			Eventually(func(g Gomega) {
				data := secretData(ctx, s, secret)
				cas := certs.CAs(data[certs.KeyCA])
				g.Expect(cas).To(HaveLen(1))
				g.Expect(data[certs.KeyCA]).NotTo(Equal(before[certs.KeyCA]))
				g.Expect(signedBy(data[certs.KeyCert], cas[0])).To(Succeed())
				g.Expect(caBundle(ctx, s, own.Configuration)).To(Equal(data[certs.KeyCA]))
				newCA = data[certs.KeyCA]
			}).WithContext(ctx).WithTimeout(framework.ServeTimeout).Should(Succeed())
			calls.expectMore(3 * config.Grace) // calls with the new CA alone

			made, refused, unready := calls.stop()
			GinkgoWriter.Printf("through both renewals: %d dry-run creates, %d refused; %d readiness probes failed\n", made, len(refused), unready)
			Expect(refused).To(BeEmpty())
			Expect(unready).To(BeZero())
			Expect(caBundle(ctx, s, own.Configuration)).To(Equal(newCA))
		})
	})
}

func secretData(ctx context.Context, s *spec, key types.NamespacedName) map[string][]byte {
	GinkgoHelper()
	secret := &corev1.Secret{}
	Expect(s.env.Client.Get(ctx, key, secret)).To(Succeed())
	return secret.Data
}

// patchSecret removes a key of the Secret, as an administrator forcing a renewal does.
func patchSecret(ctx context.Context, s *spec, key types.NamespacedName, remove string) {
	GinkgoHelper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	patch := client.RawPatch(types.JSONPatchType, fmt.Appendf(nil, `[{"op":"remove","path":"/data/%s"}]`, jsonPointer(remove)))
	Expect(s.env.Client.Patch(ctx, secret, patch)).To(Succeed())
}

func jsonPointer(s string) string { return strings.ReplaceAll(s, "/", "~1") }

// caBundle is the caBundle of the configuration's first webhook, which
// the Rotator writes into each.
func caBundle(ctx context.Context, s *spec, name string) []byte {
	GinkgoHelper()
	hooks := &admissionregistrationv1.MutatingWebhookConfiguration{}
	Expect(s.env.Client.Get(ctx, types.NamespacedName{Name: name}, hooks)).To(Succeed())
	Expect(hooks.Webhooks).NotTo(BeEmpty())
	return hooks.Webhooks[0].ClientConfig.CABundle
}

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

// ready fails unless the probe address answers /readyz with 200.
func ready(address string) error {
	resp, err := http.Get("http://" + address + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// calls creates labelled Flyte jobs (dry-run) and probes /readyz, each in a loop, until stop.
type calls struct {
	made, probed, unready atomic.Int64
	mu                    sync.Mutex
	refused               []string
	cancel                context.CancelFunc
	done                  sync.WaitGroup
}

func startCalls(s *spec, probeAddress string) *calls {
	ctx, cancel := context.WithCancel(context.Background())
	c := &calls{cancel: cancel}
	c.done.Add(2)
	go func() {
		defer GinkgoRecover()
		defer c.done.Done()
		for ctx.Err() == nil {
			job := s.job(fixtures.HorovodWorkerCommand).Label(ownCertificatesLabel, "true").Obj()
			err := s.env.Client.Create(ctx, job, client.DryRunAll)
			if ctx.Err() != nil {
				return
			}
			c.made.Add(1)
			_, mutated := job.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
			if err != nil || !mutated {
				c.mu.Lock()
				c.refused = append(c.refused, fmt.Sprintf("%s: mutated=%t: %v", time.Now().Format(time.StampMilli), mutated, err))
				c.mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() {
		defer GinkgoRecover()
		defer c.done.Done()
		for ctx.Err() == nil {
			c.probed.Add(1)
			if err := ready(probeAddress); err != nil {
				c.unready.Add(1)
				GinkgoWriter.Printf("%s: not ready: %v\n", time.Now().Format(time.StampMilli), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return c
}

// expectMore waits for, and at least, d, and fails unless creates and
// probes were made meanwhile: however slow the machine, each step is
// called through.
func (c *calls) expectMore(d time.Duration) {
	GinkgoHelper()
	made, probed := c.made.Load(), c.probed.Load()
	time.Sleep(d)
	Eventually(func(g Gomega) {
		g.Expect(c.made.Load()).To(BeNumerically(">=", made+3), "dry-run creates")
		g.Expect(c.probed.Load()).To(BeNumerically(">=", probed+3), "readiness probes")
	}).WithTimeout(framework.ServeTimeout).Should(Succeed())
}

func (c *calls) stop() (made int64, refused []string, unready int64) {
	c.cancel()
	c.done.Wait()
	return c.made.Load(), c.refused, c.unready.Load()
}
