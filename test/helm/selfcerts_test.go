package helm

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// selfObjects are what certificates.source=self renders beside the
// webhook: the empty Secret and the RBAC on it and the configuration.
var selfObjects = []string{"Secret/flyte-mpi-webhook-webhook-certs",
	"Role/flyte-mpi-webhook-webhook-certificates", "RoleBinding/flyte-mpi-webhook-webhook-certificates",
	"ClusterRole/flyte-mpi-webhook-webhook-certificates", "ClusterRoleBinding/flyte-mpi-webhook-webhook-certificates"}

// selfValues are the values of certificates.source=self, with every
// option of the chart that changes the Deployment or adds an object.
var selfValues = map[string]map[string]any{
	"alone": withImage("certificates.source", "self"),
	"with client certificates, a NetworkPolicy and the node's network": withImage("certificates.source", "self",
		"clientAuth.enabled", true, "webhook.hostNetwork", true, "webhook.port", 10260,
		"networkPolicy.enabled", true, "networkPolicy.webhookFrom", []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}},
		"networkPolicy.apiServerTo", []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.1/32"}}}),
	"mode both": withImage("certificates.source", "self", "mode", "both"),
}

// TestRenderSelfTwiceIsTheSameBytes renders the chart twice with the same
// values, as a GitOps sync does at each sync with `helm template`: with
// certificates.source=self the two are the same bytes and carry neither a
// key nor a certificate, so that applying the second changes nothing. With
// the default, generate, they differ: each render makes a new CA.
func TestRenderSelfTwiceIsTheSameBytes(t *testing.T) {
	for name, vals := range selfValues {
		t.Run(name, func(t *testing.T) {
			var apiVersions []string
			if vals["mode"] == "both" {
				apiVersions = []string{MutatingAdmissionPolicyAPI}
			}
			first, err := RenderBytes(vals, apiVersions...)
			if err != nil {
				t.Fatal(err)
			}
			second, err := RenderBytes(vals, apiVersions...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, second) {
				t.Errorf("two renders differ:\n%s", cmp.Diff(string(first), string(second)))
			}
			expectNoKeyMaterial(t, first)
		})
	}
	t.Run("generate, for contrast", func(t *testing.T) {
		first, err := RenderBytes(withImage())
		if err != nil {
			t.Fatal(err)
		}
		second, err := RenderBytes(withImage())
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(first, second) {
			t.Error("two renders with certificates.source=generate are the same bytes: then this test proves nothing of self's")
		}
		if len(keyMaterial(first)) < 2 {
			t.Errorf("keyMaterial finds %q in a render with generated certificates: it would miss them in self's", keyMaterial(first))
		}
	})
}

// expectNoKeyMaterial fails when manifest holds key material or a caBundle.
func expectNoKeyMaterial(t *testing.T, manifest []byte) {
	t.Helper()
	if found := keyMaterial(manifest); len(found) > 0 {
		t.Errorf("the render holds %q: key material, or a caBundle", found)
	}
}

// keyMaterial lists what manifest holds of a PEM block, plain or
// base64-encoded at any of the three alignments, and of a caBundle.
func keyMaterial(manifest []byte) []string {
	markers := []string{"-----BEGIN", "caBundle:"}
	for offset := range 3 {
		encoded := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", offset) + "-----BEGIN"))
		// The groups of four that "-----BEGIN" alone decides.
		start := 0
		if offset > 0 {
			start = 4
		}
		markers = append(markers, encoded[start:len(encoded)-4])
	}
	var found []string
	for _, marker := range markers {
		if bytes.Contains(manifest, []byte(marker)) {
			found = append(found, marker)
		}
	}
	return found
}

// TestRenderSelfRBACIsMinimal holds certificates.source=self's RBAC to the
// Secret it renders and the one configuration, by name, with the verbs the
// webhook uses (get, list, watch and update: test/envtest runs it under
// these rules alone, ownCertificatesRules), for the webhook's
// ServiceAccount; and every other source to no RBAC.
func TestRenderSelfRBACIsMinimal(t *testing.T) {
	m, err := Render(selfValues["alone"])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(withoutGeneratedSecret(slices.Clone(webhookObjects)), selfObjects), kinds(m)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	const (
		role        = "Role/flyte-mpi-webhook-webhook-certificates"
		clusterRole = "ClusterRole/flyte-mpi-webhook-webhook-certificates"
		secret      = "Secret/flyte-mpi-webhook-webhook-certs"
	)
	subject := `[{"kind":"ServiceAccount","name":"flyte-mpi-webhook-webhook-server","namespace":"` + Namespace + `"}]`
	want := map[string]string{
		role + " {.metadata.namespace}": Namespace,
		role + " {.rules}": `[{"apiGroups":[""],"resourceNames":["flyte-mpi-webhook-webhook-certs"],"resources":["secrets"],` +
			`"verbs":["get","list","watch","update"]}]`,
		clusterRole + " {.rules}": `[{"apiGroups":["admissionregistration.k8s.io"],` +
			`"resourceNames":["flyte-mpi-webhook-mutating-webhook-configuration"],"resources":["mutatingwebhookconfigurations"],` +
			`"verbs":["get","list","watch","update"]}]`,
		"RoleBinding/flyte-mpi-webhook-webhook-certificates {.subjects}":        subject,
		"RoleBinding/flyte-mpi-webhook-webhook-certificates {.roleRef.name}":    "flyte-mpi-webhook-webhook-certificates",
		"ClusterRoleBinding/flyte-mpi-webhook-webhook-certificates {.subjects}": subject,
		"ClusterRoleBinding/flyte-mpi-webhook-webhook-certificates {.roleRef}":  `{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"flyte-mpi-webhook-webhook-certificates"}`,
		// The names the rules grant are the objects rendered.
		secret + " {.metadata.name}":                             "flyte-mpi-webhook-webhook-certs",
		webhookConfig + " {.metadata.name}":                      "flyte-mpi-webhook-mutating-webhook-configuration",
		deployment + " {.spec.template.spec.serviceAccountName}": "flyte-mpi-webhook-webhook-server",
	}
	if diff := cmp.Diff(want, fields(t, m, want)); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}

	for _, vals := range []map[string]any{
		withImage(), withImage("certificates.source", "secret", "certificates.secret.name", "c", "certificates.secret.caBundle", "Q0E="),
	} {
		m, err := Render(vals)
		if err != nil {
			t.Fatal(err)
		}
		for _, object := range kinds(m) {
			if strings.Contains(object, "Role") {
				t.Errorf("certificates.source=%v renders %s: only self needs RBAC", vals["certificates"], object)
			}
		}
	}
}

func withoutGeneratedSecret(objects []string) []string {
	return slices.DeleteFunc(objects, func(s string) bool { return s == "Secret/flyte-mpi-webhook-webhook-server-cert" })
}
