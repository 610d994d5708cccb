package helm

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// v010Commit is release v0.1.0's commit: the last before the changes
// CHANGELOG.md lists under [Unreleased]. Its chart and webhook have the
// Horovod rule, which an upgrade from it removes.
const v010Commit = "ba904b8a4c96255c3aefcfdf0ca7b49768dcb437"

// v010SourceHorovod is the source v0.1.0's Horovod rule gave a job.
const v010SourceHorovod mutate.Source = "horovod"

// v010StoredSource is, for each Flyte-built job, the source v0.1.0 gives it
// installed in mode with its chart's defaults: its Horovod rule gave a
// Horovod task that declares no worker command the sshd of
// flytekitplugins-kfmpi's example.
func v010StoredSource(mode string) map[string]mutate.Source {
	sources := storedSource(mode)
	sources[fixtures.HorovodNoWorkerCommand] = v010SourceHorovod
	sources[fixtures.HorovodLauncherCommand] = v010SourceHorovod
	return sources
}

var (
	v010Once   sync.Once
	v010Chart  string
	v010Binary string
	v010Err    error
)

// v010 returns the chart directory and the webhook binary of release
// v0.1.0, from this clone's own history (git archive of v010Commit, built
// with the module cache), once per test binary.
func v010(t *testing.T) (chart, binary string) {
	t.Helper()
	v010Once.Do(func() { v010Chart, v010Binary, v010Err = checkout(v010Commit, "0.1.0") })
	if v010Err != nil {
		t.Fatal(v010Err)
	}
	return v010Chart, v010Binary
}

// checkout extracts commit of this clone into a temporary directory, checks
// that its chart has version, and builds its webhook.
func checkout(commit, version string) (chart, binary string, err error) {
	root, err := fixtures.RepoRoot()
	if err != nil {
		return "", "", err
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("the chart %s's commit %s is not in this clone's history (a shallow clone? git fetch --unshallow): %w\n%s",
			version, commit, err, out)
	}
	dir, err := testTempDir("chart-" + version + "-")
	if err != nil {
		return "", "", err
	}
	tarball, src := filepath.Join(dir, "src.tar"), filepath.Join(dir, "src")
	for _, args := range [][]string{
		{"git", "-C", root, "archive", "--format=tar", "--prefix=src/", "-o", tarball, commit},
		{"tar", "-x", "-f", tarball, "-C", dir},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("%v: %w\n%s", args, err, out)
		}
	}
	chart = filepath.Join(src, "charts", "flyte-mpi-webhook")
	loaded, err := loader.Load(chart)
	if err != nil {
		return "", "", fmt.Errorf("the chart of %s: %w", commit, err)
	}
	if loaded.Metadata.Version != version {
		return "", "", fmt.Errorf("the chart of %s has version %s, want %s", commit, loaded.Metadata.Version, version)
	}
	binary, err = goBuildWebhook(src)
	return chart, binary, err
}

// mixPolicies checks the states between v0.1.0's admission policy and this
// chart's that an upgrade of mode policy or both may pass through. Helm
// updates the MutatingAdmissionPolicy before its binding (kinds it does not
// know go last, by name), and so does kubectl apply of config/'s installs,
// but the API server watches the two apart and may take the updates in
// either order: this chart's policy, without paramKind, with v0.1.0's
// binding, whose paramRef the API server then ignores; or v0.1.0's policy,
// with its paramKind, with this chart's binding, which gives it no
// parameter. In each, no job is refused, a worker command the task declared
// is injected, and a job that declares none is left as Flyte made it.
func (c *cluster) mixPolicies(ctx context.Context, t *testing.T) {
	chart, _ := v010(t)
	old, err := RenderChart(chart, values("mode", "policy"), MutatingAdmissionPolicyAPI)
	if err != nil {
		t.Fatal(err)
	}
	current, err := Render(values("mode", "policy"), MutatingAdmissionPolicyAPI)
	if err != nil {
		t.Fatal(err)
	}
	find := func(m *manifests.Manifests, kind string) *unstructured.Unstructured {
		obj, err := m.Find(kind)
		if err != nil {
			t.Fatal(err)
		}
		return obj.DeepCopy()
	}
	// v0.1.0's binding reads its parameter, denying every job without it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := c.client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	parameter := find(old, "ConfigMap")
	if err := c.client.Create(ctx, parameter); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.client.Delete(context.Background(), parameter) })

	for i, state := range []struct {
		name            string
		policy, binding *manifests.Manifests
	}{
		{"this chart's policy, v0.1.0's binding", current, old},
		{"v0.1.0's policy, this chart's binding", old, current},
	} {
		t.Run(state.name, func(t *testing.T) {
			// Names of each state's own, so that the API server cannot bind
			// one state's binding to the other's policy while it lets go of it.
			policy, binding := find(state.policy, "MutatingAdmissionPolicy"), find(state.binding, "MutatingAdmissionPolicyBinding")
			name := fmt.Sprintf("%s-%d", policy.GetName(), i)
			policy.SetName(name)
			binding.SetName(name)
			if err := unstructured.SetNestedField(binding.Object, name, "spec", "policyName"); err != nil {
				t.Fatal(err)
			}
			for _, obj := range []*unstructured.Unstructured{policy, binding} {
				if err := c.client.Create(ctx, obj); err != nil {
					t.Fatal(err)
				}
			}
			c.expectStored(ctx, t, "policy", storedSource("policy"))
			for _, obj := range []*unstructured.Unstructured{binding, policy} {
				if err := c.client.Delete(ctx, obj); err != nil {
					t.Fatal(err)
				}
			}
			c.waitForJobsStored(ctx, t, unchanged())
		})
	}
}
