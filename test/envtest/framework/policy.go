package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// ConfiguredOptions returns the options the webhook's Deployment in m runs
// with: the binary's defaults and the flags the Deployment's args set, as
// the kubelet expands them. config/ sets none of the decision flags; one is
// an error, so that a new one is not silently left out.
func ConfiguredOptions(m *manifests.Manifests) (mutate.Options, error) {
	opts := mutate.DefaultOptions()
	deployment := &appsv1.Deployment{}
	if err := m.Decode("Deployment", deployment); err != nil {
		return opts, err
	}
	containers := deployment.Spec.Template.Spec.Containers
	if len(containers) != 1 {
		return opts, fmt.Errorf("the Deployment has %d containers, want 1", len(containers))
	}
	args, err := m.ExpandedArgs(containers[0], deployment.Namespace)
	if err != nil {
		return opts, err
	}
	serverFlags := []string{"cert-dir", "port", "health-probe-bind-address", "metrics-bind-address"}
	for _, arg := range args {
		if name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "="); !slices.Contains(serverFlags, name) {
			return opts, fmt.Errorf("the Deployment sets --%s, which ConfiguredOptions does not know", name)
		}
	}
	return opts, nil
}

// InstallPolicies installs the admission policies that m renders, and the
// Namespace it renders, for the Flyte MPIJobs that carry the
// label key label only: each binding is installed as a copy, named after it
// with -name (label's name), whose matchResources select that label. The
// policies and the other objects are shared: one already installed, by
// another call, stays. Every other kind that m renders (the webhook's server
// and its configuration) is left out. It returns once the policies mutate
// and warn; ctx bounds that wait.
func (e *Env) InstallPolicies(ctx context.Context, m *manifests.Manifests, label string) error {
	_, name, ok := strings.Cut(label, "/")
	if !ok || name == "" {
		return fmt.Errorf("label %q: expected a prefixed key, such as test.mpi.flyte.org/%s", label, label)
	}
	for _, obj := range m.Objects {
		obj = obj.DeepCopy()
		switch obj.GetKind() {
		case "Namespace", "MutatingAdmissionPolicy", "ValidatingAdmissionPolicy":
		case "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding":
			obj.SetName(obj.GetName() + "-" + name)
			selector := map[string]any{"matchExpressions": []any{map[string]any{"key": label, "operator": "Exists"}}}
			if err := unstructured.SetNestedField(obj.Object, selector, "spec", "matchResources", "objectSelector"); err != nil {
				return err
			}
		default:
			continue
		}
		if err := e.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("installing %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return e.waitForPolicies(ctx, label)
}

// waitForPolicies returns once a dry-run of a Flyte job labelled label that
// the mutating policy changes is changed, and one that the warnings' policy
// warns about gets a warning: the API server picks up a policy and its
// binding a little after storing them.
func (e *Env) waitForPolicies(ctx context.Context, label string) error {
	c, warnings, err := e.WarningClient()
	if err != nil {
		return err
	}
	var mutated, warned bool
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, ServeTimeout, true, func(ctx context.Context) (bool, error) {
		job := e.Job("default", fixtures.HorovodWorkerCommand).Label(label, "true").Obj()
		if lastErr = c.Create(ctx, job, client.DryRunAll); lastErr != nil {
			return false, nil
		}
		_, mutated = job.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
		sidecar := map[string]any{"name": "sidecar", "image": "busybox"}
		job = e.Job("default", fixtures.HorovodWorkerCommand).Label(label, "true").FirstWorkerContainer(sidecar).Obj()
		before := len(warnings.Messages())
		if lastErr = c.Create(ctx, job, client.DryRunAll); lastErr != nil {
			return false, nil
		}
		warned = len(warnings.Messages()) > before
		return mutated && warned, nil
	})
	if err != nil {
		return fmt.Errorf("policies for jobs labelled %q: waiting for them to mutate (%t) and warn (%t): %w",
			label, mutated, warned, errors.Join(err, lastErr))
	}
	return nil
}

// ServerSetMetadata are the metadata fields the API server sets on a stored
// object, which differ between two creations of one job.
var ServerSetMetadata = []string{"name", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"}

// WithoutServerSetMetadata returns a copy of obj without ServerSetMetadata
// and without the labels keys, such as the labels that route a job.
func WithoutServerSetMetadata(obj *unstructured.Unstructured, labels ...string) *unstructured.Unstructured {
	out := obj.DeepCopy()
	for _, field := range ServerSetMetadata {
		unstructured.RemoveNestedField(out.Object, "metadata", field)
	}
	for _, key := range labels {
		unstructured.RemoveNestedField(out.Object, "metadata", "labels", key)
	}
	return out
}

// Recreatable returns stored as a job to create again: without what the API
// server set, with a generateName.
func Recreatable(stored *unstructured.Unstructured) *unstructured.Unstructured {
	out := WithoutServerSetMetadata(stored)
	out.SetGenerateName(stored.GetGenerateName())
	return out
}
