package helm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSyncSelf applies what `helm template` renders, twice, as a GitOps
// sync does (Flux's server-side apply, with its field owner; Argo CD
// renders the same way), with certificates.source=self: the webhook, run
// as its pods would be, fills the Secret and the caBundle after the first,
// and the second leaves both as they were while every job is stored as it
// decides. test/cluster does the same with kubectl apply, both client-side
// and server-side, on a real node.
func TestSyncSelf(t *testing.T) {
	ctx := t.Context()
	c := startCluster(t, "v2beta1")
	if err := c.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		t.Fatal(err)
	}
	sync := func() {
		t.Helper()
		m, err := Render(withImage("certificates.source", "self"))
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range m.Objects {
			if err := c.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("gitops-sync"), client.ForceOwnership); err != nil {
				t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
	}

	sync()
	stop := c.runWebhook(ctx, t, Namespace, buildWebhook(t))
	defer stop()
	c.expectJobsStoredAsDecided(ctx, t, "webhook")
	caBundle, secret := c.selfCertificate(ctx, t, Namespace)

	sync()
	gotCABundle, gotSecret := c.selfCertificate(ctx, t, Namespace)
	if caBundle != gotCABundle {
		t.Errorf("the second sync changed the caBundle")
	}
	if diff := cmp.Diff(secret, gotSecret); diff != "" {
		t.Errorf("the second sync changed the webhook's Secret (-before +after):\n%s", diff)
	}
	c.expectJobsStoredAsDecided(ctx, t, "webhook")
}
