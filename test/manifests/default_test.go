package manifests_test

// The install, config/default, as a cluster gets it: these tests check that
// its objects name each other, that the pod serves what the webhook
// configuration calls, and that it is locked down.

import (
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// namespace is where config/default installs the webhook.
const namespace = "flyte-mpi-webhook-system"

// install is config/default rendered, with its objects decoded.
type install struct {
	*manifests.Manifests
	namespace      *corev1.Namespace
	serviceAccount *corev1.ServiceAccount
	service        *corev1.Service
	deployment     *appsv1.Deployment
	pdb            *policyv1.PodDisruptionBudget
	webhook        *admissionregistrationv1.MutatingWebhookConfiguration
	issuer         *unstructured.Unstructured
	certificate    *unstructured.Unstructured
	// container is the Deployment's one container, args its arguments as
	// the kubelet expands them, and flags those --name=value arguments.
	container corev1.Container
	args      []string
	flags     map[string]string
}

func renderDefault(t *testing.T) *install {
	t.Helper()
	m := render(t, filepath.Join(configDir, "default"), "")
	in := &install{
		Manifests:      m,
		namespace:      decode[corev1.Namespace](t, m, "Namespace"),
		serviceAccount: decode[corev1.ServiceAccount](t, m, "ServiceAccount"),
		service:        decode[corev1.Service](t, m, "Service"),
		deployment:     decode[appsv1.Deployment](t, m, "Deployment"),
		pdb:            decode[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget"),
		webhook:        decode[admissionregistrationv1.MutatingWebhookConfiguration](t, m, "MutatingWebhookConfiguration"),
	}
	var err error
	if in.certificate, err = m.FindNamed("Certificate", "flyte-mpi-webhook-serving-cert"); err != nil {
		t.Fatal(err)
	}
	issuer, _, _ := unstructured.NestedString(in.certificate.Object, "spec", "issuerRef", "name")
	if in.issuer, err = m.FindNamed("Issuer", issuer); err != nil {
		t.Fatalf("the serving Certificate's issuer: %v", err)
	}
	containers := in.deployment.Spec.Template.Spec.Containers
	if len(containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(containers))
	}
	in.container = containers[0]
	if in.args, err = m.ExpandedArgs(in.container, in.deployment.Namespace); err != nil {
		t.Fatal(err)
	}
	in.flags = map[string]string{}
	for _, arg := range in.args {
		name, value, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !ok || !strings.HasPrefix(arg, "--") {
			t.Fatalf("container argument %q: want --name=value", arg)
		}
		in.flags[name] = value
	}
	return in
}

// flag returns the value of a flag of the container, or the binary's default.
func (in *install) flag(name, binaryDefault string) string {
	if v, ok := in.flags[name]; ok {
		return v
	}
	return binaryDefault
}

// flagPort returns the port of a bind-address flag of the container, or of the binary's default.
func (in *install) flagPort(t *testing.T, name, binaryDefault string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(in.flag(name, binaryDefault))
	if err != nil {
		t.Fatalf("--%s: %v", name, err)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatalf("--%s: %v", name, err)
	}
	return int32(n)
}

// containerPort resolves a port, by name or number, to one the container declares.
func (in *install) containerPort(t *testing.T, port intstr.IntOrString) int32 {
	t.Helper()
	for _, p := range in.container.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort
		}
	}
	t.Fatalf("port %s: the container declares no such port: %v", port.String(), in.container.Ports)
	return 0
}

// podLabels are the labels of the Deployment's pods.
func (in *install) podLabels() labels.Set { return in.deployment.Spec.Template.Labels }

func selects(t *testing.T, selector *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(set)
}

func TestDefaultRendersEachObjectOnceInItsNamespace(t *testing.T) {
	m := render(t, filepath.Join(configDir, "default"), "")
	type id struct{ Kind, Namespace, Name string }
	var got []id
	for _, obj := range m.Objects {
		got = append(got, id{obj.GetKind(), obj.GetNamespace(), obj.GetName()})
	}
	// kubectl's order: the Namespace first, the webhook configuration once
	// what it calls exists. No RBAC: the webhook reads nothing from the API server.
	want := []id{
		{"Namespace", "", namespace},
		{"ServiceAccount", namespace, "flyte-mpi-webhook-webhook-server"},
		{"Service", namespace, "flyte-mpi-webhook-webhook-service"},
		{"Deployment", namespace, "flyte-mpi-webhook-webhook-server"},
		{"PodDisruptionBudget", namespace, "flyte-mpi-webhook-webhook-server"},
		{"Certificate", namespace, "flyte-mpi-webhook-ca"},
		{"Certificate", namespace, "flyte-mpi-webhook-serving-cert"},
		{"Issuer", namespace, "flyte-mpi-webhook-ca-issuer"},
		{"Issuer", namespace, "flyte-mpi-webhook-selfsigned-issuer"},
		{"MutatingWebhookConfiguration", "", "flyte-mpi-webhook-mutating-webhook-configuration"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}
}

func TestDefaultWebhookConfiguration(t *testing.T) {
	in := renderDefault(t)

	want := []admissionregistrationv1.MutatingWebhook{{
		Name:                    "mpijob-worker-command.mpi.flyte.org",
		AdmissionReviewVersions: []string{"v1"},
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Name: in.service.Name, Namespace: in.service.Namespace, Path: ptr.To(admission.Path),
		}},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{"kubeflow.org"}, APIVersions: []string{"v1", "v2beta1"},
				Resources: []string{"mpijobs"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}},
		MatchPolicy:        ptr.To(admissionregistrationv1.Equivalent),
		SideEffects:        ptr.To(admissionregistrationv1.SideEffectClassNone),
		ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		TimeoutSeconds:     ptr.To[int32](5),
		FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "execution-id", Operator: metav1.LabelSelectorOpExists},
			{Key: "task-name", Operator: metav1.LabelSelectorOpExists},
		}},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
			Values: []string{"kube-system", namespace},
		}}},
	}}
	if diff := cmp.Diff(want, in.webhook.Webhooks); diff != "" {
		t.Errorf("webhooks (-want +got):\n%s", diff)
	}

	// The API server sends the webhook what the binary would select anyway.
	for _, w := range in.webhook.Webhooks {
		selector, err := metav1.LabelSelectorAsSelector(w.ObjectSelector)
		if err != nil {
			t.Fatal(err)
		}
		binary, err := labels.Parse(mutate.DefaultFlyteTaskSelector)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := selector.String(), binary.String(); got != want {
			t.Errorf("webhook %s: objectSelector %q, want the binary's default --flyte-task-selector %q", w.Name, got, want)
		}
	}

	wantAnnotations := map[string]string{
		"cert-manager.io/inject-ca-from": in.certificate.GetNamespace() + "/" + in.certificate.GetName(),
	}
	if diff := cmp.Diff(wantAnnotations, in.webhook.Annotations); diff != "" {
		t.Errorf("annotations: the CA comes from the rendered Certificate (-want +got):\n%s", diff)
	}
}

func TestDefaultCertificateIsForTheService(t *testing.T) {
	in := renderDefault(t)
	spec, _, err := unstructured.NestedMap(in.certificate.Object, "spec")
	if err != nil {
		t.Fatal(err)
	}
	secretNames := []any{}
	for _, v := range in.deployment.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secretNames = append(secretNames, v.Secret.SecretName)
		}
	}
	if len(secretNames) != 1 {
		t.Fatalf("the Deployment mounts secrets %v, want one: the Certificate's", secretNames)
	}
	want := map[string]any{
		"dnsNames": []any{
			in.service.Name + "." + in.service.Namespace + ".svc",
			in.service.Name + "." + in.service.Namespace + ".svc.cluster.local",
		},
		"issuerRef": map[string]any{"kind": in.issuer.GetKind(), "name": in.issuer.GetName()},
		// ECDSA P-256: a handshake costs a tenth of RSA 2048's.
		"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)},
		"secretName": secretNames[0],
	}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Errorf("Certificate spec (-want +got):\n%s", diff)
	}
	if in.certificate.GetNamespace() != in.issuer.GetNamespace() {
		t.Errorf("Certificate in %s, Issuer in %s: an Issuer serves its own namespace only", in.certificate.GetNamespace(), in.issuer.GetNamespace())
	}
}

// TestDefaultServingCertificateHasItsOwnCA checks the chain that keeps a
// renewal from failing calls: the serving Certificate is signed by a CA
// Issuer whose CA is a long-lived Certificate that keeps its key, itself
// self-signed. The caBundle, that CA, then survives the serving
// certificate's renewals.
func TestDefaultServingCertificateHasItsOwnCA(t *testing.T) {
	in := renderDefault(t)
	caSecret, _, _ := unstructured.NestedString(in.issuer.Object, "spec", "ca", "secretName")
	if caSecret == "" {
		t.Fatalf("the serving Certificate's Issuer %s is not a CA Issuer: %v", in.issuer.GetName(), in.issuer.Object["spec"])
	}
	var ca *unstructured.Unstructured
	for _, obj := range in.Objects {
		if name, _, _ := unstructured.NestedString(obj.Object, "spec", "secretName"); obj.GetKind() == "Certificate" && name == caSecret {
			ca = obj
		}
	}
	if ca == nil {
		t.Fatalf("no Certificate writes the CA Issuer's secret %s", caSecret)
	}
	isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA")
	rotation, _, _ := unstructured.NestedString(ca.Object, "spec", "privateKey", "rotationPolicy")
	if !isCA || rotation != "Never" {
		t.Errorf("CA Certificate %s: isCA %t, privateKey.rotationPolicy %q; want true, Never", ca.GetName(), isCA, rotation)
	}
	if dnsNames, found, _ := unstructured.NestedSlice(ca.Object, "spec", "dnsNames"); found {
		t.Errorf("CA Certificate %s has dnsNames %v: the replacements are for the serving Certificate", ca.GetName(), dnsNames)
	}
	rootName, _, _ := unstructured.NestedString(ca.Object, "spec", "issuerRef", "name")
	root, err := in.FindNamed("Issuer", rootName)
	if err != nil {
		t.Fatal(err)
	}
	if _, selfSigned, _ := unstructured.NestedMap(root.Object, "spec", "selfSigned"); !selfSigned {
		t.Errorf("the CA's Issuer %s is not self-signed: %v", rootName, root.Object["spec"])
	}
	for _, obj := range []*unstructured.Unstructured{ca, root, in.issuer} {
		if obj.GetNamespace() != in.certificate.GetNamespace() {
			t.Errorf("%s %s in %s, the serving Certificate in %s", obj.GetKind(), obj.GetName(), obj.GetNamespace(), in.certificate.GetNamespace())
		}
	}
}

func TestDefaultPodServesWhatTheWebhookConfigurationCalls(t *testing.T) {
	in := renderDefault(t)
	defaults := server.DefaultConfig()

	// API server → Service port → the container's webhook port → --port.
	if diff := cmp.Diff([]corev1.ServicePort{{
		Name: "webhook", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromString("webhook-server"),
	}}, in.service.Spec.Ports); diff != "" {
		t.Errorf("Service ports (-want +got):\n%s", diff)
	}
	for _, w := range in.webhook.Webhooks {
		if port := ptr.Deref(w.ClientConfig.Service.Port, 443); port != in.service.Spec.Ports[0].Port {
			t.Errorf("webhook %s calls port %d, the Service serves %d", w.Name, port, in.service.Spec.Ports[0].Port)
		}
	}
	webhookPort, err := strconv.ParseInt(in.flag("port", strconv.Itoa(defaults.Port)), 10, 32)
	if err != nil {
		t.Fatalf("--port: %v", err)
	}
	if got := in.containerPort(t, in.service.Spec.Ports[0].TargetPort); got != int32(webhookPort) {
		t.Errorf("the Service targets container port %d, the webhook serves on --port %d", got, webhookPort)
	}
	if !selects(t, &metav1.LabelSelector{MatchLabels: in.service.Spec.Selector}, in.podLabels()) {
		t.Errorf("the Service selects %v, the pods are labelled %v", in.service.Spec.Selector, in.podLabels())
	}

	// The probes: the paths the binary serves, at --health-probe-bind-address.
	healthPort := in.flagPort(t, "health-probe-bind-address", defaults.HealthProbeBindAddress)
	for _, tt := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{name: "readiness", probe: in.container.ReadinessProbe, path: "/readyz"},
		{name: "liveness", probe: in.container.LivenessProbe, path: "/healthz"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.probe == nil || tt.probe.HTTPGet == nil {
				t.Fatalf("%s probe %v: want an HTTP GET", tt.name, tt.probe)
			}
			if tt.probe.HTTPGet.Path != tt.path {
				t.Errorf("%s probe path %q, want %q", tt.name, tt.probe.HTTPGet.Path, tt.path)
			}
			if got := in.containerPort(t, tt.probe.HTTPGet.Port); got != healthPort {
				t.Errorf("%s probe on port %d, the binary serves probes on %d", tt.name, got, healthPort)
			}
		})
	}
	metricsPort := in.flagPort(t, "metrics-bind-address", defaults.MetricsBindAddress)
	if got := in.containerPort(t, intstr.FromString("metrics")); got != metricsPort {
		t.Errorf("container port metrics is %d, the binary serves metrics on %d", got, metricsPort)
	}

	// The certificate: --cert-dir is where the Certificate's secret is mounted, read-only.
	certDir := in.flags["cert-dir"]
	var mounts []corev1.VolumeMount
	for _, m := range in.container.VolumeMounts {
		if m.MountPath == certDir {
			mounts = append(mounts, m)
		}
	}
	secretName, _, _ := unstructured.NestedString(in.certificate.Object, "spec", "secretName")
	if len(mounts) != 1 {
		t.Fatalf("--cert-dir=%s: %d volumes mounted there, want the Certificate's secret", certDir, len(mounts))
	}
	if !mounts[0].ReadOnly {
		t.Errorf("--cert-dir=%s is mounted writable", certDir)
	}
	if i := slices.IndexFunc(in.deployment.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == mounts[0].Name && v.Secret != nil && v.Secret.SecretName == secretName
	}); i < 0 {
		t.Errorf("--cert-dir=%s holds volume %s, want the Certificate's secret %s", certDir, mounts[0].Name, secretName)
	}
}

func TestDefaultContainerArgsAreFlagsOfTheBinary(t *testing.T) {
	in := renderDefault(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	binary := filepath.Join(t.TempDir(), "webhook")
	build := exec.Command("go", "build", "-o", binary, "./cmd/webhook")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/webhook: %v\n%s", err, out)
	}
	withClientAuth := renderClientAuth(t, "default")
	clientAuthArgs, err := withClientAuth.ExpandedArgs(decode[appsv1.Deployment](t, withClientAuth, "Deployment").Spec.Template.Spec.Containers[0], namespace)
	if err != nil {
		t.Fatal(err)
	}
	// -h last: the binary exits 0 once it has parsed every flag before it,
	// and 2 at the first flag it does not know.
	for _, tt := range []struct {
		name string
		args []string
		ok   bool
	}{
		{name: "the Deployment's", args: in.args, ok: true},
		{name: "the Deployment's with config/client-auth", args: clientAuthArgs, ok: true},
		{name: "an unknown flag", args: []string{"--no-such-flag=1"}, ok: false},
		// v0.1.0's, gone with the Horovod rule: an overlay that still sets it
		// gets a webhook that does not start (CHANGELOG.md).
		{name: "--horovod-worker-command", args: []string{"--horovod-worker-command=/usr/sbin/sshd -De"}, ok: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(binary, append(slices.Clone(tt.args), "-h")...).CombinedOutput()
			if got := err == nil; got != tt.ok {
				t.Errorf("webhook %s -h: error %v, want success %t:\n%s", strings.Join(tt.args, " "), err, tt.ok, out)
			}
		})
	}
}

func TestDefaultPodIsLockedDown(t *testing.T) {
	in := renderDefault(t)
	pod := in.deployment.Spec.Template.Spec

	if diff := cmp.Diff(&corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}, pod.SecurityContext); diff != "" {
		t.Errorf("pod securityContext (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}, in.container.SecurityContext); diff != "" {
		t.Errorf("container securityContext (-want +got):\n%s", diff)
	}
	// The pod meets the "restricted" Pod Security Standard; the namespace enforces it
	// (the envtest suites check that the API server agrees).
	if got := in.namespace.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace label pod-security.kubernetes.io/enforce=%q, want restricted", got)
	}

	// No API server credentials: the webhook reads nothing from it.
	if pod.ServiceAccountName != in.serviceAccount.Name {
		t.Errorf("the pod runs as ServiceAccount %q, want the rendered %q", pod.ServiceAccountName, in.serviceAccount.Name)
	}
	for name, automount := range map[string]*bool{
		"pod": pod.AutomountServiceAccountToken, "ServiceAccount": in.serviceAccount.AutomountServiceAccountToken,
	} {
		if ptr.Deref(automount, true) {
			t.Errorf("%s: automountServiceAccountToken is not false", name)
		}
	}
	for _, m := range in.container.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("volume %s is mounted writable at %s; the webhook writes no file", m.Name, m.MountPath)
		}
	}

	for _, resources := range []struct {
		name string
		list corev1.ResourceList
	}{{"requests", in.container.Resources.Requests}, {"limits", in.container.Resources.Limits}} {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := resources.list[r]; !ok || q.IsZero() {
				t.Errorf("resources.%s.%s is not set", resources.name, r)
			}
		}
	}
	for r, limit := range in.container.Resources.Limits {
		if request, ok := in.container.Resources.Requests[r]; ok && request.Cmp(limit) > 0 {
			t.Errorf("resources: %s request %s is above its limit %s", r, request.String(), limit.String())
		}
	}
}

func TestDefaultDeploymentSurvivesANodeDrain(t *testing.T) {
	in := renderDefault(t)
	spec := in.deployment.Spec

	if !selects(t, spec.Selector, in.podLabels()) {
		t.Errorf("the Deployment selects %v, its pods are labelled %v", spec.Selector, in.podLabels())
	}
	if got := ptr.Deref(spec.Replicas, 1); got != 2 {
		t.Errorf("replicas: %d, want 2", got)
	}

	// The PodDisruptionBudget keeps one of them, and lets a drain evict the other.
	if diff := cmp.Diff(ptr.To(intstr.FromInt32(1)), in.pdb.Spec.MinAvailable); diff != "" {
		t.Errorf("PodDisruptionBudget minAvailable (-want +got):\n%s", diff)
	}
	if !selects(t, in.pdb.Spec.Selector, in.podLabels()) {
		t.Errorf("the PodDisruptionBudget selects %v, the pods are labelled %v", in.pdb.Spec.Selector, in.podLabels())
	}

	// The replicas spread over nodes, so that losing one node leaves one serving.
	spread := slices.IndexFunc(spec.Template.Spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
		return c.TopologyKey == corev1.LabelHostname && c.MaxSkew == 1 && selects(t, c.LabelSelector, in.podLabels())
	})
	if spread < 0 {
		t.Errorf("no topology spread constraint over %s selects the pods: %v", corev1.LabelHostname, spec.Template.Spec.TopologySpreadConstraints)
	}
}

func TestFailurePolicyIgnoreChangesOnlyTheFailurePolicy(t *testing.T) {
	want := render(t, filepath.Join(configDir, "default"), "").Objects
	for _, obj := range want {
		if obj.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		for _, w := range webhooks {
			w.(map[string]any)["failurePolicy"] = string(admissionregistrationv1.Ignore)
		}
		if err := unstructured.SetNestedSlice(obj.Object, webhooks, "webhooks"); err != nil {
			t.Fatal(err)
		}
	}
	got := render(t, filepath.Join(configDir, "failure-policy-ignore"), "").Objects
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config/failure-policy-ignore, against config/default with failurePolicy Ignore (-want +got):\n%s", diff)
	}
}

// TestDefaultDecidesWithTheBinaryDefaults checks that the webhook of
// config/default gets no decision flag and reads no ConfigMap: it decides as
// mutate.DefaultOptions, which leave a job whose task declares no worker
// command as Flyte made it (test/envtest proves the policy decides the same).
func TestDefaultDecidesWithTheBinaryDefaults(t *testing.T) {
	in := renderDefault(t)
	var got []string
	for name := range in.flags {
		if !slices.Contains([]string{"cert-dir", "port", "health-probe-bind-address", "metrics-bind-address"}, name) {
			got = append(got, name)
		}
	}
	if len(got) > 0 {
		t.Errorf("the container sets the decision flags %q; want the binary's defaults", got)
	}
	for _, env := range in.container.Env {
		if env.ValueFrom != nil && env.ValueFrom.ConfigMapKeyRef != nil {
			t.Errorf("the container's env %s reads the ConfigMap %s; want none", env.Name, env.ValueFrom.ConfigMapKeyRef.Name)
		}
	}
	if len(in.container.EnvFrom) > 0 {
		t.Errorf("the container's envFrom %+v; want none", in.container.EnvFrom)
	}
}
