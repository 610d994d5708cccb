package envtest_test

import (
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// certManagerKinds are the kinds of config/certmanager, which the API server
// serves only once cert-manager's CRDs are installed; envtest has none.
var certManagerKinds = []schema.GroupKind{
	{Group: "cert-manager.io", Kind: "Issuer"},
	{Group: "cert-manager.io", Kind: "Certificate"},
}

// describeInstall declares the specs of the install, config/default: the API
// server accepts what `kubectl apply -k config/default` creates.
func describeInstall(s *spec) bool {
	return Describe("the install, config/default", func() {
		It("passes a server-side dry-run create, and the namespace's Pod Security Standard", func(ctx SpecContext) {
			c, warnings, err := s.env.WarningClient()
			Expect(err).NotTo(HaveOccurred())

			// The namespace for real, with the rendered labels: the other
			// objects are dry-run into it, and its pod-security labels make
			// the API server warn about a pod template that breaks them. It
			// stays: envtest runs no namespace controller, so a deleted
			// namespace would stay Terminating for the specs that use it too.
			rendered := &corev1.Namespace{}
			Expect(s.env.Manifests.Decode("Namespace", rendered)).To(Succeed())
			ns := &corev1.Namespace{}
			ns.Name = rendered.Name
			_, err = controllerutil.CreateOrUpdate(ctx, c, ns, func() error {
				if ns.Labels == nil {
					ns.Labels = map[string]string{}
				}
				for k, v := range rendered.Labels {
					ns.Labels[k] = v
				}
				return nil
			})
			Expect(err).NotTo(HaveOccurred())

			var dryRun, skipped []string
			for _, obj := range s.env.Manifests.Objects {
				obj = obj.DeepCopy()
				kind := obj.GroupVersionKind().GroupKind()
				switch {
				case kind.Kind == "Namespace":
					continue
				case slices.Contains(certManagerKinds, kind):
					skipped = append(skipped, kind.String())
					continue
				case kind.Kind == "MutatingWebhookConfiguration":
					// Start installed it under its own name already.
					obj.SetName(obj.GetName() + "-dry-run")
				}
				Expect(c.Create(ctx, obj, client.DryRunAll)).To(Succeed(), "dry-run create of %s %s", kind, client.ObjectKeyFromObject(obj))
				dryRun = append(dryRun, kind.String())
			}
			Expect(dryRun).To(ConsistOf("ServiceAccount", "Service", "Deployment.apps",
				"PodDisruptionBudget.policy", "MutatingWebhookConfiguration.admissionregistration.k8s.io"))
			// The CA's Issuer and Certificate, and the serving Certificate's Issuer and Certificate.
			Expect(skipped).To(ConsistOf("Issuer.cert-manager.io", "Certificate.cert-manager.io",
				"Issuer.cert-manager.io", "Certificate.cert-manager.io"))
			Expect(warnings.Messages()).To(BeEmpty(), "the API server's warnings, such as Pod Security violations")
		})
	})
}
