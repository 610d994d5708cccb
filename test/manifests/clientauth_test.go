package manifests_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// clientCAConfigMap is the ConfigMap config/client-auth reads the client CA
// from, which a user creates in the install's namespace.
const clientCAConfigMap = "flyte-mpi-webhook-client-ca"

// renderClientAuth renders the install with config/client-auth.
func renderClientAuth(t *testing.T, install string) *manifests.Manifests {
	t.Helper()
	m, err := manifests.RenderWith(filepath.Join(configDir, install), filepath.Join(configDir, "client-auth"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestClientAuthChangesOnlyTheCertDir checks that config/client-auth, in
// each install that runs the webhook, adds --client-ca-name and projects the
// CA's ConfigMap beside the serving certificate's Secret, and changes nothing
// else.
func TestClientAuthChangesOnlyTheCertDir(t *testing.T) {
	for _, install := range []string{"default", "default-with-policy"} {
		t.Run(install, func(t *testing.T) {
			plain, withClientAuth := render(t, filepath.Join(configDir, install), ""), renderClientAuth(t, install)
			want := decode[appsv1.Deployment](t, plain, "Deployment")
			pod := &want.Spec.Template.Spec
			pod.Containers[0].Args = append(pod.Containers[0].Args, "--client-ca-name=client-ca.crt")
			pod.Volumes = []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "webhook-server-cert"}}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: clientCAConfigMap},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "client-ca.crt"}}}},
				},
			}}}}
			if diff := cmp.Diff(want, decode[appsv1.Deployment](t, withClientAuth, "Deployment")); diff != "" {
				t.Errorf("the Deployment (-config/%s with the flag and the volume +with config/client-auth):\n%s", install, diff)
			}
			others := func(m *manifests.Manifests) []*unstructured.Unstructured {
				return slices.DeleteFunc(slices.Clone(m.Objects), func(obj *unstructured.Unstructured) bool { return obj.GetKind() == "Deployment" })
			}
			if diff := cmp.Diff(others(plain), others(withClientAuth)); diff != "" {
				t.Errorf("the other objects (-config/%s +with config/client-auth):\n%s", install, diff)
			}
		})
	}
}

// TestClientAuthCAIsInTheCertDir follows --client-ca-name to the file the
// kubelet writes: the ConfigMap's ca.crt, in the volume mounted at --cert-dir.
func TestClientAuthCAIsInTheCertDir(t *testing.T) {
	m := renderClientAuth(t, "default")
	deployment := decode[appsv1.Deployment](t, m, "Deployment")
	container := deployment.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	for _, arg := range container.Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		flags[name] = value
	}
	mount := slices.IndexFunc(container.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == flags["cert-dir"] })
	if mount < 0 {
		t.Fatalf("nothing is mounted at --cert-dir=%s", flags["cert-dir"])
	}
	var holds []string
	for _, v := range deployment.Spec.Template.Spec.Volumes {
		if v.Name != container.VolumeMounts[mount].Name || v.Projected == nil {
			continue
		}
		for _, source := range v.Projected.Sources {
			if source.ConfigMap == nil {
				continue
			}
			for _, item := range source.ConfigMap.Items {
				holds = append(holds, source.ConfigMap.Name+"/"+item.Key+" as "+item.Path)
			}
		}
	}
	if want := []string{clientCAConfigMap + "/ca.crt as " + flags["client-ca-name"]}; !cmp.Equal(want, holds) {
		t.Errorf("--cert-dir=%s holds %q from ConfigMaps; want %q for --client-ca-name=%s", flags["cert-dir"], holds, want, flags["client-ca-name"])
	}
}
