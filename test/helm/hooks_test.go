package helm

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// The hooks' names: helm test's objects share one, as Helm 3's helm test
// --logs needs, and the pre-delete hook's another.
const (
	testHook       = "flyte-mpi-webhook-helm-test"
	unregisterHook = "flyte-mpi-webhook-unregister"
)

// testHooks and unregisterHooks are the hooks' Kind/name.
var (
	testHooks = []string{"Namespace/" + testHook, "ServiceAccount/" + testHook, "Role/" + testHook,
		"RoleBinding/" + testHook, "Pod/" + testHook}
	unregisterHooks = []string{"ServiceAccount/" + unregisterHook, "ClusterRole/" + unregisterHook,
		"ClusterRoleBinding/" + unregisterHook, "Job/" + unregisterHook}
)

// hookAnnotations reads each hook's Helm annotations: its events, weight
// and delete policy.
func hookAnnotations(m *manifests.Manifests) map[string]string {
	got := map[string]string{}
	for _, obj := range m.Objects {
		a := obj.GetAnnotations()
		got[obj.GetKind()+"/"+obj.GetName()] = a["helm.sh/hook"] + " weight=" + a["helm.sh/hook-weight"] + " delete=" + a["helm.sh/hook-delete-policy"]
	}
	return got
}

// TestRenderHooks holds which hooks each mode renders, when Helm runs each,
// and what deletes it: none outlives its run but a failed one's Pod or Job,
// and helm test's Pod, which the next test replaces.
func TestRenderHooks(t *testing.T) {
	allTestHooks := map[string]string{
		"Namespace/" + testHook:      "test weight=-3 delete=before-hook-creation,hook-succeeded",
		"ServiceAccount/" + testHook: "test weight=-2 delete=before-hook-creation,hook-succeeded",
		"Role/" + testHook:           "test weight=-2 delete=before-hook-creation,hook-succeeded",
		"RoleBinding/" + testHook:    "test weight=-1 delete=before-hook-creation,hook-succeeded",
		"Pod/" + testHook:            "test weight= delete=before-hook-creation",
	}
	allUnregisterHooks := map[string]string{
		"ServiceAccount/" + unregisterHook:     "pre-delete weight=-2 delete=before-hook-creation,hook-succeeded",
		"ClusterRole/" + unregisterHook:        "pre-delete weight=-2 delete=before-hook-creation,hook-succeeded",
		"ClusterRoleBinding/" + unregisterHook: "pre-delete weight=-1 delete=before-hook-creation,hook-succeeded",
		"Job/" + unregisterHook:                "pre-delete weight= delete=before-hook-creation,hook-succeeded",
	}
	merged := func(maps ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range maps {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	withoutNamespace := merged(allTestHooks)
	delete(withoutNamespace, "Namespace/"+testHook)
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   map[string]string
	}{
		{"mode webhook", withImage(), merged(allTestHooks, allUnregisterHooks)},
		{"mode both", withImage("mode", "both"), merged(allTestHooks, allUnregisterHooks)},
		{"mode policy, with the image: the test alone, no webhook to unregister", withImage("mode", "policy"), allTestHooks},
		{"mode policy, without an image: none", values("mode", "policy"), map[string]string{}},
		{"hooks.preDelete.enabled=false", withImage("hooks.preDelete.enabled", false), allTestHooks},
		{"hooks.test.namespace: one of the user's, which the test does not make", withImage("hooks.test.namespace", "flytesnacks-development"),
			merged(withoutNamespace, allUnregisterHooks)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := RenderHooks(tc.values, MutatingAdmissionPolicyAPI)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, hookAnnotations(m)); diff != "" {
				t.Errorf("the hooks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderHooksRBAC holds the hooks to their one right each: helm test's
// ServiceAccount may create MPIJobs in the test's namespace; the pre-delete
// hook's may delete the release's MutatingWebhookConfiguration, by name.
// The release itself grants nothing.
func TestRenderHooksRBAC(t *testing.T) {
	for _, tc := range []struct {
		name          string
		values        map[string]any
		testNamespace string
	}{
		{"the test's own namespace", withImage(), testHook},
		{"hooks.test.namespace", withImage("hooks.test.namespace", "flytesnacks-development"), "flytesnacks-development"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := RenderHooks(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			release, err := Render(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"} {
				if obj, err := release.Find(kind); err == nil {
					t.Errorf("the release installs a %s, %s: only the hooks get rights", kind, obj.GetName())
				}
			}
			configuration, err := release.Find("MutatingWebhookConfiguration")
			if err != nil {
				t.Fatal(err)
			}

			role := &rbacv1.Role{}
			if err := m.Decode("Role", role); err != nil {
				t.Fatal(err)
			}
			if role.Namespace != tc.testNamespace {
				t.Errorf("the test's Role is in %q, want the test's namespace %q", role.Namespace, tc.testNamespace)
			}
			wantTest := []rbacv1.PolicyRule{{APIGroups: []string{"kubeflow.org"}, Resources: []string{"mpijobs"}, Verbs: []string{"create"}}}
			if diff := cmp.Diff(wantTest, role.Rules); diff != "" {
				t.Errorf("the test's rules (-want +got):\n%s", diff)
			}
			clusterRole := &rbacv1.ClusterRole{}
			if err := m.Decode("ClusterRole", clusterRole); err != nil {
				t.Fatal(err)
			}
			wantUnregister := []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"},
				Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{configuration.GetName()}, Verbs: []string{"delete"}}}
			if diff := cmp.Diff(wantUnregister, clusterRole.Rules); diff != "" {
				t.Errorf("the pre-delete hook's rules (-want +got):\n%s", diff)
			}

			for _, tb := range []struct {
				kind, role, account, namespace string
			}{
				{"RoleBinding", "Role/" + testHook, testHook, tc.testNamespace},
				{"ClusterRoleBinding", "ClusterRole/" + unregisterHook, unregisterHook, ""},
			} {
				var roleRef rbacv1.RoleRef
				var subjects []rbacv1.Subject
				var namespace string
				if tb.kind == "RoleBinding" {
					b := &rbacv1.RoleBinding{}
					if err := m.Decode(tb.kind, b); err != nil {
						t.Fatal(err)
					}
					roleRef, subjects, namespace = b.RoleRef, b.Subjects, b.Namespace
				} else {
					b := &rbacv1.ClusterRoleBinding{}
					if err := m.Decode(tb.kind, b); err != nil {
						t.Fatal(err)
					}
					roleRef, subjects = b.RoleRef, b.Subjects
				}
				if got := roleRef.Kind + "/" + roleRef.Name; got != tb.role || namespace != tb.namespace {
					t.Errorf("the %s binds %s in %q, want %s in %q", tb.kind, got, namespace, tb.role, tb.namespace)
				}
				want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: tb.account, Namespace: Namespace}}
				if diff := cmp.Diff(want, subjects); diff != "" {
					t.Errorf("the %s's subjects (-want +got):\n%s", tb.kind, diff)
				}
			}
		})
	}
}

// TestRenderHookPods holds the hooks' pods: the webhook's image and the
// subcommand, the decision flags the webhook gets and no log level, Pod
// Security's restricted profile, the ServiceAccount's token (they call the
// API server), and labels that neither the Service nor the
// PodDisruptionBudget selects.
func TestRenderHookPods(t *testing.T) {
	objectSelector := `--object-selector={"matchExpressions":[{"key":"execution-id","operator":"Exists"},{"key":"task-name","operator":"Exists"}]}`
	for _, tc := range []struct {
		name     string
		values   map[string]any
		wantTest []string
	}{
		{"the defaults", withImage(), []string{"-n=" + testHook, "--mode=webhook",
			"--image=" + image + ":v0.1.0", objectSelector}},
		{"mode both, a version, decisions and a log level", withImage("mode", "both", "hooks.test.mpiJobVersion", "v1",
			"decisions.flyteTaskSelector", "execution-id,team=$ml", "decisions.onInvalid", "warn", "logLevel", "debug",
			"image.digest", "sha256:"+strings.Repeat("a", 64)),
			[]string{"-n=" + testHook, "--mode=both", "--image=" + image + ":v0.1.0@sha256:" + strings.Repeat("a", 64), objectSelector,
				"--mpijob-version=v1", "--on-invalid=warn", "--flyte-task-selector=execution-id,team=$$ml"}},
		{"mode policy", withImage("mode", "policy", "hooks.test.namespace", "flytesnacks-development"),
			[]string{"-n=flytesnacks-development", "--mode=policy", "--image=" + image + ":v0.1.0", objectSelector}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := RenderHooks(tc.values, MutatingAdmissionPolicyAPI)
			if err != nil {
				t.Fatal(err)
			}
			release, err := Render(tc.values, MutatingAdmissionPolicyAPI)
			if err != nil {
				t.Fatal(err)
			}
			specs, podLabels := hookPodSpecs(t, m)
			if diff := cmp.Diff(tc.wantTest, specs["helm test's Pod"].Containers[0].Args); diff != "" {
				t.Errorf("the test's args (-want +got):\n%s", diff)
			}
			selectors := releasePodSelectors(release)
			for what, spec := range specs {
				checkHookPod(t, what, spec, podLabels[what], selectors)
			}
		})
	}
}

// hookPodSpecs decodes the hooks' pods, helm test's Pod and the pre-delete
// Job's, by what they are, with their labels, and checks each one's command.
func hookPodSpecs(t *testing.T, m *manifests.Manifests) (map[string]corev1.PodSpec, map[string]map[string]string) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := m.Decode("Pod", pod); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/webhook", "check"}, pod.Spec.Containers[0].Command); diff != "" {
		t.Errorf("the test's command (-want +got):\n%s", diff)
	}
	specs := map[string]corev1.PodSpec{"helm test's Pod": pod.Spec}
	podLabels := map[string]map[string]string{"helm test's Pod": pod.Labels}
	if _, err := m.Find("Job"); err != nil {
		return specs, podLabels
	}
	job := &batchv1.Job{}
	if err := m.Decode("Job", job); err != nil {
		t.Fatal(err)
	}
	specs["the pre-delete Job's Pod"] = job.Spec.Template.Spec
	podLabels["the pre-delete Job's Pod"] = job.Spec.Template.Labels
	if diff := cmp.Diff([]string{"/webhook", "unregister"}, job.Spec.Template.Spec.Containers[0].Command); diff != "" {
		t.Errorf("the Job's command (-want +got):\n%s", diff)
	}
	want := []string{"--name=flyte-mpi-webhook-mutating-webhook-configuration"}
	if diff := cmp.Diff(want, job.Spec.Template.Spec.Containers[0].Args); diff != "" {
		t.Errorf("the Job's args (-want +got):\n%s", diff)
	}
	return specs, podLabels
}

// releasePodSelectors reads the selectors of the webhook's pods that the
// release's Service, PodDisruptionBudget and NetworkPolicy carry.
func releasePodSelectors(release *manifests.Manifests) []labels.Selector {
	var selectors []labels.Selector
	for _, kind := range []string{"Service", "PodDisruptionBudget", "NetworkPolicy"} {
		if obj, err := release.Find(kind); err == nil {
			selectors = append(selectors, labels.SelectorFromSet(podSelector(obj.Object, kind)))
		}
	}
	return selectors
}

// checkHookPod holds one hook's pod to the webhook's image, a token for the
// API server, Pod Security's restricted profile, 64Mi and labels that none of
// selectors matches.
func checkHookPod(t *testing.T, what string, spec corev1.PodSpec, podLabels map[string]string, selectors []labels.Selector) {
	t.Helper()
	c := spec.Containers[0]
	if !strings.HasPrefix(c.Image, image+":") {
		t.Errorf("%s runs %s, want the webhook's image", what, c.Image)
	}
	if spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken {
		t.Errorf("%s has no token for the API server", what)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever || spec.HostNetwork ||
		spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot ||
		spec.SecurityContext.SeccompProfile == nil || spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation ||
		c.SecurityContext.Capabilities == nil || !slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("%s is not as Pod Security's restricted profile asks: %+v", what, spec)
	}
	if c.Resources.Limits.Memory().String() != "64Mi" {
		t.Errorf("%s's resources: %+v", what, c.Resources)
	}
	for _, s := range selectors {
		if s.Matches(labels.Set(podLabels)) {
			t.Errorf("%s's labels %v are the webhook's pods' (%s)", what, podLabels, s)
		}
	}
}

// podSelector reads the pods' labels that a Service (spec.selector), a
// PodDisruptionBudget or a NetworkPolicy (spec.selector.matchLabels,
// spec.podSelector.matchLabels) selects.
func podSelector(obj map[string]any, kind string) map[string]string {
	spec, _ := obj["spec"].(map[string]any)
	var raw any
	switch kind {
	case "Service":
		raw = spec["selector"]
	case "PodDisruptionBudget":
		raw = spec["selector"].(map[string]any)["matchLabels"]
	case "NetworkPolicy":
		raw = spec["podSelector"].(map[string]any)["matchLabels"]
	}
	out := map[string]string{}
	m, _ := raw.(map[string]any)
	for k, v := range m {
		out[k], _ = v.(string)
	}
	return out
}

// TestRenderTestNamespaceLabels holds the namespace helm test makes to
// webhook.namespaceSelectorExpressions: labelled so that the webhook and the
// policy are called for it.
func TestRenderTestNamespaceLabels(t *testing.T) {
	expressions := []any{
		map[string]any{"key": "flyte.org/project", "operator": "Exists"},
		map[string]any{"key": "tier", "operator": "In", "values": []any{"ml", "hpc"}},
		map[string]any{"key": "legacy", "operator": "DoesNotExist"},
		map[string]any{"key": "team", "operator": "NotIn", "values": []any{"ops"}},
	}
	m, err := RenderHooks(withImage("webhook.namespaceSelectorExpressions", expressions, "networkPolicy.enabled", true,
		"networkPolicy.webhookFrom", []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/8"}}}))
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{}
	if err := m.Decode("Namespace", ns); err != nil {
		t.Fatal(err)
	}
	release, err := Render(withImage("webhook.namespaceSelectorExpressions", expressions))
	if err != nil {
		t.Fatal(err)
	}
	configuration, err := release.Find("MutatingWebhookConfiguration")
	if err != nil {
		t.Fatal(err)
	}
	hook := configuration.Object["webhooks"].([]any)[0].(map[string]any)
	selector := hook["namespaceSelector"].(map[string]any)["matchExpressions"].([]any)
	got := map[string]string{"kubernetes.io/metadata.name": ns.Name}
	for k, v := range ns.Labels {
		got[k] = v
	}
	for _, e := range selector {
		e := e.(map[string]any)
		key, op := e["key"].(string), e["operator"].(string)
		var values []string
		for _, v := range asSlice(e["values"]) {
			values = append(values, v.(string))
		}
		value, has := got[key]
		ok := map[string]bool{
			"In":           has && slices.Contains(values, value),
			"NotIn":        !has || !slices.Contains(values, value),
			"Exists":       has,
			"DoesNotExist": !has,
		}[op]
		if !ok {
			t.Errorf("the test's namespace %v does not meet %s %s %v", got, key, op, values)
		}
	}
	if ns.Labels["tier"] != "ml" || ns.Labels["flyte.org/project"] != "flyte-mpi-webhook-test" {
		t.Errorf("the test's namespace's labels: %v", ns.Labels)
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestRenderRefusesHooks holds the hooks' values to the schema and the
// chart's checks, each refusal naming the value.
func TestRenderRefusesHooks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"an MPIJob version that is none", withImage("hooks.test.mpiJobVersion", "v2"), []string{"hooks/test/mpiJobVersion", "v2beta1"}},
		{"a test namespace that is no name", withImage("hooks.test.namespace", "Flyte_Jobs"), []string{"hooks/test/namespace"}},
		{"a test namespace the webhook is not called for", withImage("hooks.test.namespace", "kube-system"),
			[]string{"hooks.test.namespace=kube-system", "never called for that namespace"}},
		{"the release's namespace as the test's", withImage("hooks.test.namespace", Namespace),
			[]string{"hooks.test.namespace=" + Namespace, "never called for that namespace"}},
		{"a pre-delete switch that is no boolean", withImage("hooks.preDelete.enabled", "yes"), []string{"hooks/preDelete/enabled", "boolean"}},
		{"a misspelt hook value", withImage("hooks.test.namespaces", "x"), []string{"namespaces"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(tc.values)
			if err == nil {
				t.Fatalf("Render succeeded; want an error with %q", tc.want)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestRenderHooksWithValuesThatLackThem renders the hooks with values that
// have no hooks, as `helm upgrade --reuse-values` from a release before them
// renders with that release's values: the test in a namespace of its own,
// and the pre-delete hook on.
func TestRenderHooksWithValuesThatLackThem(t *testing.T) {
	dir := chartWithoutValues(t, "hooks")
	rel, err := renderRelease(&KubeVersion, ReleaseName, dir, withImage())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range rel.Hooks {
		got = append(got, h.Kind+"/"+h.Name)
	}
	slices.Sort(got)
	if diff := cmp.Diff(sorted(testHooks, unregisterHooks), got); diff != "" {
		t.Errorf("the hooks (-want +got):\n%s", diff)
	}
}
