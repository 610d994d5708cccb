package manifests_test

// The policy installs: config/policy, the MutatingAdmissionPolicy and the
// ValidatingAdmissionPolicy that do the webhook's usual case in the API
// server; config/policy-only and config/default-with-policy, which install
// them alone and beside the webhook. test/envtest proves what they store;
// these tests check that they are scoped as the webhook and name what
// config/default names.

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// policies is config/policy rendered, with its objects decoded.
type policies struct {
	mutating          *admissionregistrationv1.MutatingAdmissionPolicy
	mutatingBinding   *admissionregistrationv1.MutatingAdmissionPolicyBinding
	validating        *admissionregistrationv1.ValidatingAdmissionPolicy
	validatingBinding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

func renderPolicy(t *testing.T) (*manifests.Manifests, *policies) {
	t.Helper()
	m := render(t, filepath.Join(configDir, "policy"), "")
	return m, &policies{
		mutating:          decode[admissionregistrationv1.MutatingAdmissionPolicy](t, m, "MutatingAdmissionPolicy"),
		mutatingBinding:   decode[admissionregistrationv1.MutatingAdmissionPolicyBinding](t, m, "MutatingAdmissionPolicyBinding"),
		validating:        decode[admissionregistrationv1.ValidatingAdmissionPolicy](t, m, "ValidatingAdmissionPolicy"),
		validatingBinding: decode[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, m, "ValidatingAdmissionPolicyBinding"),
	}
}

// TestPolicyIsScopedAsTheWebhook checks that each policy matches exactly the
// requests config/default's webhook configuration matches.
func TestPolicyIsScopedAsTheWebhook(t *testing.T) {
	in := renderDefault(t)
	_, p := renderPolicy(t)
	w := in.webhook.Webhooks[0]
	rules := make([]admissionregistrationv1.NamedRuleWithOperations, len(w.Rules))
	for i, r := range w.Rules {
		rules[i] = admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: r}
	}
	want := &admissionregistrationv1.MatchResources{
		ResourceRules: rules, MatchPolicy: w.MatchPolicy,
		ObjectSelector: w.ObjectSelector, NamespaceSelector: w.NamespaceSelector,
	}
	for name, got := range map[string]*admissionregistrationv1.MatchResources{
		"MutatingAdmissionPolicy":   p.mutating.Spec.MatchConstraints,
		"ValidatingAdmissionPolicy": p.validating.Spec.MatchConstraints,
	} {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s matchConstraints, against the webhook's rules and selectors (-want +got):\n%s", name, diff)
		}
	}
	if got := p.mutating.Spec.ReinvocationPolicy; got != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("reinvocationPolicy %s, want IfNeeded, as the webhook's", got)
	}
	if got := p.mutating.Spec.Mutations; len(got) != 1 || got[0].PatchType != admissionregistrationv1.PatchTypeJSONPatch {
		t.Errorf("mutations %+v, want one JSONPatch", got)
	}
	if got := p.validatingBinding.Spec.ValidationActions; !slices.Equal(got, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}) {
		t.Errorf("the warnings' validationActions %v, want [Warn]: a warning never refuses a job", got)
	}
	// No parameter: a binding whose parameter is missing refuses every job
	// it matches, and the policy has nothing to read in one.
	if p.mutating.Spec.ParamKind != nil || p.mutatingBinding.Spec.ParamRef != nil {
		t.Errorf("paramKind %+v, paramRef %+v: want neither", p.mutating.Spec.ParamKind, p.mutatingBinding.Spec.ParamRef)
	}
	if p.mutatingBinding.Spec.PolicyName != p.mutating.Name || p.validatingBinding.Spec.PolicyName != p.validating.Name {
		t.Errorf("the bindings name %q and %q, want the policies %q and %q", p.mutatingBinding.Spec.PolicyName,
			p.validatingBinding.Spec.PolicyName, p.mutating.Name, p.validating.Name)
	}
}

// TestPolicyConditionsAreTheWebhooksNegated checks that the policies and the
// webhook of config/default-with-policy split the jobs between them by the
// same two expressions: the policy takes a job without annotations within
// what it reads; the webhook, the rest.
func TestPolicyConditionsAreTheWebhooksNegated(t *testing.T) {
	_, p := renderPolicy(t)
	conditions := p.mutating.Spec.MatchConditions
	if len(conditions) != 2 || conditions[0].Expression[0] != '!' {
		t.Fatalf("the mutating policy's matchConditions %+v: want !annotated and within-what-it-reads", conditions)
	}
	annotated, within := conditions[0].Expression[1:], conditions[1].Expression
	if diff := cmp.Diff(conditions, p.validating.Spec.MatchConditions); diff != "" {
		t.Errorf("the warnings' matchConditions, against the mutating policy's (-want +got):\n%s", diff)
	}

	both := render(t, filepath.Join(configDir, "default-with-policy"), "")
	hook := decode[admissionregistrationv1.MutatingWebhookConfiguration](t, both, "MutatingWebhookConfiguration")
	want := []admissionregistrationv1.MatchCondition{{Name: "left-to-the-webhook-by-the-policy", Expression: annotated + " || !" + within}}
	if diff := cmp.Diff(want, hook.Webhooks[0].MatchConditions); diff != "" {
		t.Errorf("config/default-with-policy's webhook matchConditions (-want +got):\n%s", diff)
	}

	only := render(t, filepath.Join(configDir, "policy-only"), "")
	noWebhook, err := only.FindNamed("ValidatingAdmissionPolicy", "flyte-mpi-webhook-no-webhook")
	if err != nil {
		t.Fatal(err)
	}
	validations, _, _ := unstructured.NestedSlice(noWebhook.Object, "spec", "validations")
	if len(validations) != 2 || validations[1].(map[string]any)["expression"] != within {
		t.Errorf("config/policy-only's no-webhook warning checks %v, want its second validation to be %q", validations, within)
	}
}

// TestPolicyInstalls checks what each install renders: config/policy-only
// has no server and needs no cert-manager; config/default-with-policy is
// config/default and config/policy, with the webhook's matchConditions.
func TestPolicyInstalls(t *testing.T) {
	policy, _ := renderPolicy(t)
	type id struct{ Kind, Namespace, Name string }
	ids := func(m *manifests.Manifests) []id {
		var out []id
		for _, obj := range m.Objects {
			out = append(out, id{obj.GetKind(), obj.GetNamespace(), obj.GetName()})
		}
		return out
	}
	want := []id{
		{"Namespace", "", namespace},
		{"MutatingAdmissionPolicy", "", "flyte-mpi-webhook-worker-command"},
		{"MutatingAdmissionPolicyBinding", "", "flyte-mpi-webhook-worker-command"},
		{"ValidatingAdmissionPolicy", "", "flyte-mpi-webhook-no-webhook"},
		{"ValidatingAdmissionPolicy", "", "flyte-mpi-webhook-warnings"},
		{"ValidatingAdmissionPolicyBinding", "", "flyte-mpi-webhook-no-webhook"},
		{"ValidatingAdmissionPolicyBinding", "", "flyte-mpi-webhook-warnings"},
	}
	if diff := cmp.Diff(want, ids(render(t, filepath.Join(configDir, "policy-only"), ""))); diff != "" {
		t.Errorf("config/policy-only (-want +got):\n%s", diff)
	}

	// config/default-with-policy: config/default's objects, the webhook
	// with its matchConditions, and config/policy's.
	wantBoth := append(render(t, filepath.Join(configDir, "default"), "").Objects, policy.Objects...)
	got := render(t, filepath.Join(configDir, "default-with-policy"), "").Objects
	for _, obj := range got {
		if obj.GetKind() == "MutatingWebhookConfiguration" {
			webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
			delete(webhooks[0].(map[string]any), "matchConditions") // TestPolicyConditionsAreTheWebhooksNegated checks them
			if err := unstructured.SetNestedSlice(obj.Object, webhooks, "webhooks"); err != nil {
				t.Fatal(err)
			}
		}
	}
	key := func(o *unstructured.Unstructured) string { return o.GetKind() + "/" + o.GetName() }
	sortObjects := func(objs []*unstructured.Unstructured) {
		slices.SortFunc(objs, func(a, b *unstructured.Unstructured) int {
			switch {
			case key(a) < key(b):
				return -1
			case key(a) > key(b):
				return 1
			}
			return 0
		})
	}
	sortObjects(wantBoth)
	sortObjects(got)
	if diff := cmp.Diff(wantBoth, got); diff != "" {
		t.Errorf("config/default-with-policy, against config/default and config/policy (-want +got):\n%s", diff)
	}
}
