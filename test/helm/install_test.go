package helm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// admissionTimeout bounds the wait for the API server to apply, or stop
// applying, a configuration or policy it has just stored.
const admissionTimeout = 30 * time.Second

// jobsNamespace is where the tests create Flyte's MPIJobs.
const jobsNamespace = "flyte-jobs"

// storedSource is, for each Flyte-built job of testdata/flyte, the source
// the install in mode records with the chart's defaults, as
// fixtures.FlyteExpected gives it: none means stored as Flyte made it, as a
// task that declares no worker command is, and as the policy alone admits
// one whose command only an annotation gives.
func storedSource(mode string) map[string]mutate.Source {
	sources := map[string]mutate.Source{}
	for _, name := range fixtures.FlyteJobs {
		expected, _ := fixtures.FlyteExpected(fixtures.NewestFlyteRelease, name)
		sources[name] = mutate.Source(expected.Webhook)
		if mode == "policy" {
			sources[name] = mutate.Source(expected.Policy)
		}
	}
	return sources
}

// helms are the Helm SDKs a release is installed with, each into a
// namespace of its own: the README's, and another, since any namespace works.
var helms = []struct {
	name      string
	namespace string
	client    func(kubeconfig, namespace string) (helmCLI, error)
}{
	{"helm 3", Namespace, func(k, ns string) (helmCLI, error) { return newHelm3(k, ns) }},
	{"helm 4", "ml-platform", func(k, ns string) (helmCLI, error) { return newHelm4(k, ns) }},
}

// TestInstall installs, upgrades and uninstalls the chart in each mode with
// Helm 3 and Helm 4, into envtest's API server for each MPIJob version,
// upgrades to it from release v0.1.0 (where v0.1.0 installs its policy, on
// an API server of its own: v010ParamCluster), and switches modes with helm
// upgrade.
// After each install and upgrade, every job of testdata/flyte is stored as
// the webhook decides; an upgrade keeps the generated certificate; an
// uninstall removes every configuration and policy.
func TestInstall(t *testing.T) {
	ctx := t.Context()
	for _, version := range []string{"v2beta1", "v1"} {
		t.Run(version, func(t *testing.T) {
			c := startCluster(t, version)
			t.Run("the policies of v0.1.0 and of this chart, mixed", func(t *testing.T) {
				c.mixPolicies(ctx, t)
			})
			for _, h := range helms {
				t.Run(h.name, func(t *testing.T) {
					cli, err := h.client(c.kubeconfig, h.namespace)
					if err != nil {
						t.Fatal(err)
					}
					for _, mode := range []string{"webhook", "policy", "both"} {
						t.Run("install, upgrade, uninstall, mode "+mode, func(t *testing.T) {
							c.installUpgradeUninstall(ctx, t, cli, h.namespace, mode)
						})
						t.Run("upgrade from v0.1.0 with --reuse-values, mode "+mode, func(t *testing.T) {
							c, cli := c, cli
							if runsPolicy(mode) {
								// v0.1.0's policy reads a ConfigMap parameter: on an API
								// server of its own (v010ParamCluster).
								c, cli = v010ParamCluster(t, version, h.client, h.namespace)
							}
							c.upgradeFromV010(ctx, t, cli, h.namespace, mode)
						})
					}
					t.Run("switch modes with helm upgrade", func(t *testing.T) {
						c.switchModes(ctx, t, cli, h.namespace)
					})
					t.Run("install, upgrade, uninstall, certificates.source self", func(t *testing.T) {
						c.installUpgradeUninstallSelf(ctx, t, cli, h.namespace)
					})
				})
			}
		})
	}
}

// installValues are the README's install's values in mode: mode policy
// needs no image.
func installValues(mode string) map[string]any {
	if mode == "policy" {
		return values("mode", mode)
	}
	return withImage("mode", mode)
}

func runsWebhook(mode string) bool { return mode != "policy" }

func runsPolicy(mode string) bool { return mode != "webhook" }

// v010ParamCluster starts an API server for one install of v0.1.0's policy,
// which reads its Horovod command from a ConfigMap parameter (paramKind),
// and a Helm client of newClient's for it. kube-apiserver 1.36 reads such
// parameters from a ConfigMap informer that it stops, for good, once no
// admission policy bound with a ConfigMap parameter is left, as when the
// upgrade from v0.1.0 removes its paramKind: a policy bound with one later
// in that process reads the ConfigMaps as they were then, and one created
// since not at all (kubernetes/kubernetes#130887; 1.37 falls back to a GET
// for one it does not find, #134423). A cluster upgraded from v0.1.0 has
// watched its ConfigMap since v0.1.0 was installed; each install here does
// too, on an API server that has never removed such a policy.
func v010ParamCluster(t *testing.T, version string, newClient func(kubeconfig, namespace string) (helmCLI, error), namespace string) (*cluster, helmCLI) {
	t.Helper()
	c := startCluster(t, version)
	cli, err := newClient(c.kubeconfig, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return c, cli
}

// workTreeChart is the directory of the chart under test.
func workTreeChart(t *testing.T) string {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func (c *cluster) installUpgradeUninstall(ctx context.Context, t *testing.T, cli helmCLI, namespace, mode string) {
	if err := cli.install(workTreeChart(t), installValues(mode)); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	stop := func() {}
	if runsWebhook(mode) {
		stop = c.runWebhook(ctx, t, namespace, buildWebhook(t))
	}
	c.expectJobsStoredAsDecided(ctx, t, mode)
	caBundle, secret := c.generatedCertificate(ctx, t, namespace, mode)

	upgraded := installValues(mode)
	upgraded["replicas"] = 3
	// helm test runs the webhook's image: mode policy, which needs none, gets one for it.
	upgraded["image"] = map[string]any{"repository": image}
	if namespace != Namespace {
		// The other release tests in a namespace of the user's, which it does not make.
		upgraded["hooks"] = map[string]any{"test": map[string]any{"namespace": jobsNamespace}}
	}
	if err := cli.upgrade(workTreeChart(t), upgraded, false); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if runsWebhook(mode) {
		stop() // the rollout: new pods, from the Deployment as upgraded
		stop = c.runWebhook(ctx, t, namespace, buildWebhook(t))
	}
	gotCABundle, gotSecret := c.generatedCertificate(ctx, t, namespace, mode)
	if caBundle != gotCABundle {
		t.Errorf("helm upgrade changed the caBundle")
	}
	if diff := cmp.Diff(secret, gotSecret); diff != "" {
		t.Errorf("helm upgrade changed the generated Secret (-before +after):\n%s", diff)
	}
	c.expectJobsStoredAsDecided(ctx, t, mode)
	c.helmTest(ctx, t, cli, namespace, mode)

	c.uninstall(ctx, t, cli, stop)
}

// installUpgradeUninstallSelf installs mode webhook with
// certificates.source=self and runs the webhook as its pods would, with
// their ServiceAccount's token and RBAC: it fills the Secret and the
// caBundle, turns ready, and every job is stored as it decides; helm
// upgrade, which renders the Secret empty as before, leaves both as they
// were, and the webhook restarted serves with them.
func (c *cluster) installUpgradeUninstallSelf(ctx context.Context, t *testing.T, cli helmCLI, namespace string) {
	vals := withImage("certificates.source", "self")
	if err := cli.install(workTreeChart(t), vals); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	stop := c.runWebhook(ctx, t, namespace, buildWebhook(t))
	c.expectJobsStoredAsDecided(ctx, t, "webhook")
	caBundle, secret := c.selfCertificate(ctx, t, namespace)

	vals["replicas"] = 3
	if err := cli.upgrade(workTreeChart(t), vals, false); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	stop()
	stop = c.runWebhook(ctx, t, namespace, buildWebhook(t))
	gotCABundle, gotSecret := c.selfCertificate(ctx, t, namespace)
	if caBundle != gotCABundle {
		t.Errorf("helm upgrade changed the caBundle")
	}
	if diff := cmp.Diff(secret, gotSecret); diff != "" {
		t.Errorf("helm upgrade changed the webhook's Secret (-before +after):\n%s", diff)
	}
	c.expectJobsStoredAsDecided(ctx, t, "webhook")
	c.uninstall(ctx, t, cli, stop)
}

// selfCertificate returns the caBundle of the webhook's configuration and
// the data of the Secret the webhook keeps with certificates.source=self,
// once the caBundle is that Secret's ca.crt.
func (c *cluster) selfCertificate(ctx context.Context, t *testing.T, namespace string) (string, map[string][]byte) {
	t.Helper()
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: ReleaseName + "-mutating-webhook-configuration"}, hook); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ReleaseName + "-webhook-certs"}, secret); err != nil {
		t.Fatal(err)
	}
	caBundle := string(hook.Webhooks[0].ClientConfig.CABundle)
	if caBundle == "" || caBundle != string(secret.Data["ca.crt"]) {
		t.Fatalf("the caBundle is not the webhook's Secret's ca.crt")
	}
	for _, key := range []string{"ca.key", "tls.crt", "tls.key"} {
		if len(secret.Data[key]) == 0 {
			t.Fatalf("the webhook's Secret has no %s", key)
		}
	}
	return caBundle, secret.Data
}

// upgradeFromV010 installs release v0.1.0 in mode, its chart and its
// webhook, and upgrades it to the chart under test as the README says, with
// helm upgrade --reuse-values, which keeps v0.1.0's default values. v0.1.0
// gives a Horovod task that declares no worker command the sshd of its
// Horovod rule; the upgrade leaves such a job as Flyte made it, still
// injects a worker command the task declared, and leaves v0.1.0's ConfigMap
// behind, which nothing reads: once it is deleted, as CHANGELOG.md says one
// may, every job is stored as before.
func (c *cluster) upgradeFromV010(ctx context.Context, t *testing.T, cli helmCLI, namespace, mode string) {
	chart, binary := v010(t)
	if err := cli.install(chart, installValues(mode)); err != nil {
		t.Fatalf("helm install of v0.1.0: %v", err)
	}
	stop := func() {}
	if runsWebhook(mode) {
		stop = c.runWebhook(ctx, t, namespace, binary)
	}
	c.expectStored(ctx, t, mode, v010StoredSource(mode))

	if err := cli.upgrade(workTreeChart(t), nil, true); err != nil {
		t.Fatalf("helm upgrade --reuse-values from v0.1.0: %v", err)
	}
	if runsWebhook(mode) {
		stop() // the rollout
		stop = c.runWebhook(ctx, t, namespace, buildWebhook(t))
	}
	c.expectJobsStoredAsDecided(ctx, t, mode)

	left := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ReleaseName + "-horovod-worker-command"}}
	if err := c.client.Delete(ctx, left); err != nil {
		t.Errorf("deleting the ConfigMap v0.1.0 left behind: %v", err)
	}
	c.expectJobsStoredAsDecided(ctx, t, mode)

	c.uninstall(ctx, t, cli, stop)
}

// switchModes goes from mode webhook to both, to policy and back to webhook
// through both, with helm upgrade, as the chart's README gives the order.
func (c *cluster) switchModes(ctx context.Context, t *testing.T, cli helmCLI, namespace string) {
	if err := cli.install(workTreeChart(t), installValues("webhook")); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	stop := c.runWebhook(ctx, t, namespace, buildWebhook(t))
	c.expectJobsStoredAsDecided(ctx, t, "webhook")
	caBundle, _ := c.generatedCertificate(ctx, t, namespace, "webhook")
	previous := "webhook"
	for _, mode := range []string{"both", "policy", "both", "webhook"} {
		if err := cli.upgrade(workTreeChart(t), withImage("mode", mode), false); err != nil {
			t.Fatalf("helm upgrade from mode %s to %s: %v", previous, mode, err)
		}
		stop()
		if runsWebhook(mode) {
			stop = c.runWebhook(ctx, t, namespace, buildWebhook(t))
			// Mode policy has no webhook, and so no certificate to keep.
			got, _ := c.generatedCertificate(ctx, t, namespace, mode)
			if runsWebhook(previous) && got != caBundle {
				t.Errorf("helm upgrade from mode %s to %s changed the caBundle", previous, mode)
			}
			caBundle = got
		}
		c.expectJobsStoredAsDecided(ctx, t, mode)
		previous = mode
	}
	c.uninstall(ctx, t, cli, stop)
}

// uninstallSettle is how long after helm uninstall jobs are still created,
// and must be admitted: the API server lets go of a deleted configuration a
// moment later.
const uninstallSettle = time.Second

// uninstall runs helm uninstall, stops the webhook the release ran (stop),
// and checks that the release left nothing that admits a job, nor
// anything of its hooks. Jobs created with a dry run, one after another,
// while helm uninstall runs and for uninstallSettle after, are all
// admitted: the pre-delete hook, which the hookRunner runs as its
// ServiceAccount while the Service still exists, has deleted the webhook
// configuration before anything else went.
func (c *cluster) uninstall(ctx context.Context, t *testing.T, cli helmCLI, stop func()) {
	t.Helper()
	c.hooks.take()
	hadWebhook := c.client.Get(ctx, client.ObjectKey{Name: ReleaseName + "-mutating-webhook-configuration"},
		&admissionregistrationv1.MutatingWebhookConfiguration{}) == nil
	var uninstallErr error
	admitted, refused := c.admissionsDuring(ctx, uninstallSettle, func() {
		uninstallErr = cli.uninstall()
		stop()
	})
	if uninstallErr != nil {
		t.Fatalf("helm uninstall: %v; the hooks ran: %+v", uninstallErr, c.hooks.take())
	}
	t.Logf("creates during helm uninstall and the %s after: %d admitted, %d refused", uninstallSettle, admitted, len(refused))
	if len(refused) > 0 {
		t.Errorf("helm uninstall: %d of %d creates refused, the first: %v", len(refused), admitted+len(refused), refused[0])
	}
	runs := c.hooks.take()
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: ReleaseName + "-mutating-webhook-configuration"}, hook); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall, the MutatingWebhookConfiguration: want NotFound, got %v", err)
	}
	unregistered := slices.IndexFunc(runs, func(r hookRun) bool { return r.name == unregisterHook })
	if hadWebhook && unregistered < 0 {
		t.Errorf("helm uninstall ran no pre-delete hook; the hooks ran: %+v", runs)
	}
	if unregistered >= 0 {
		r := runs[unregistered]
		if r.err != nil || !r.serviceExisted || !strings.Contains(r.output, ": deleted, and") {
			t.Errorf("the pre-delete hook: want it to delete the configuration while the Service exists, got %+v", r)
		}
	}
	for _, obj := range []client.Object{
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: c.hookNamespace(runs), Name: unregisterHook}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: c.hookNamespace(runs), Name: unregisterHook}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: unregisterHook}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: unregisterHook}},
	} {
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			t.Errorf("after helm uninstall, the pre-delete hook's %T %s: want NotFound, got %v", obj, obj.GetName(), err)
		}
	}
	c.expectUninstalled(ctx, t)
}

// hookNamespace is the namespace the hooks of runs ran in, the release's.
func (c *cluster) hookNamespace(runs []hookRun) string {
	for _, r := range runs {
		if r.namespace != "" {
			return r.namespace
		}
	}
	return Namespace
}

// generatedCertificate returns the caBundle of the webhook's configuration
// and the data of the Secret the chart generated, when mode runs the webhook.
func (c *cluster) generatedCertificate(ctx context.Context, t *testing.T, namespace, mode string) (string, map[string][]byte) {
	t.Helper()
	if !runsWebhook(mode) {
		return "", nil
	}
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: ReleaseName + "-mutating-webhook-configuration"}, hook); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ReleaseName + "-webhook-server-cert"}, secret); err != nil {
		t.Fatal(err)
	}
	caBundle := string(hook.Webhooks[0].ClientConfig.CABundle)
	if caBundle == "" || caBundle != string(secret.Data["ca.crt"]) {
		t.Fatalf("the caBundle is not the generated Secret's ca.crt")
	}
	return caBundle, secret.Data
}

// expectJobsStoredAsDecided creates every job of testdata/flyte and checks
// that it is stored as the webhook decides in mode (storedSource).
func (c *cluster) expectJobsStoredAsDecided(ctx context.Context, t *testing.T, mode string) {
	t.Helper()
	c.expectStored(ctx, t, mode, storedSource(mode))
}

// expectStored creates every job of sources and checks that it is stored
// with its source, by what mode installed: it waits for the API server to
// apply what was just installed (waitForJobsStored), then creates each job
// for real.
func (c *cluster) expectStored(ctx context.Context, t *testing.T, mode string, sources map[string]mutate.Source) {
	t.Helper()
	c.waitForJobsStored(ctx, t, sources)
	if err := c.checkJobs(ctx, sources); err != nil {
		t.Fatalf("mode %s: %v", mode, err)
	}
	if runsWebhook(mode) {
		// The API server called the chart's Service, by its cluster IP.
		service := &corev1.Service{}
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: c.webhookNamespace(ctx, t), Name: ReleaseName + "-webhook-service"}, service); err != nil {
			t.Fatal(err)
		}
		if want := service.Spec.ClusterIP + ":443"; !slices.Contains(c.proxy.asked(), want) {
			t.Errorf("the API server never connected to the Service at %s; it asked for %v", want, c.proxy.asked())
		}
	}
}

// waitForJobsStored waits, with dry-run creations, until every job of
// sources is stored with its source: the API server applies what was just
// installed, or deleted, a moment later.
func (c *cluster) waitForJobsStored(ctx context.Context, t *testing.T, sources map[string]mutate.Source) {
	t.Helper()
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, admissionTimeout, true, func(ctx context.Context) (bool, error) {
		lastErr = c.checkJobs(ctx, sources, client.DryRunAll)
		return lastErr == nil, nil
	})
	if err != nil {
		t.Fatalf("the jobs, dry-run, are not stored with their sources %v: %v", sources, errors.Join(err, lastErr))
	}
}

// webhookNamespace is the namespace of the webhook configuration's Service.
func (c *cluster) webhookNamespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: ReleaseName + "-mutating-webhook-configuration"}, hook); err != nil {
		t.Fatal(err)
	}
	return hook.Webhooks[0].ClientConfig.Service.Namespace
}

// checkJobs creates each job of sources, with opts, and returns an error
// naming those not stored with their source.
func (c *cluster) checkJobs(ctx context.Context, sources map[string]mutate.Source, opts ...client.CreateOption) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(sources)) {
		job, err := fixtures.FlyteJob(c.version, name)
		if err != nil {
			return err
		}
		job.SetNamespace(jobsNamespace)
		job.SetGenerateName(job.GetName() + "-")
		job.SetName("")
		sent := job.DeepCopy()
		if err := c.client.Create(ctx, job, opts...); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if err := storedAsDecided(job, sent, sources[name]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// storedAsDecided checks that stored, the job sent as sent, carries source
// and runs sshd on its workers; or, for no source, has the workers as sent.
func storedAsDecided(stored, sent *unstructured.Unstructured, source mutate.Source) error {
	path := []string{"spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers"}
	containers, _, _ := unstructured.NestedSlice(stored.Object, path...)
	gotSource := stored.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
	if source == mutate.SourceNone {
		sentContainers, _, _ := unstructured.NestedSlice(sent.Object, path...)
		if gotSource != "" {
			return fmt.Errorf("stored with source %q, want as Flyte made it", gotSource)
		}
		if diff := cmp.Diff(sentContainers, containers); diff != "" {
			return fmt.Errorf("the workers changed (-sent +stored):\n%s", diff)
		}
		return nil
	}
	if gotSource != string(source) {
		return fmt.Errorf("stored with source %q, want %q", gotSource, source)
	}
	first, _ := containers[0].(map[string]any)
	command, _, _ := unstructured.NestedStringSlice(first, "command")
	if diff := cmp.Diff(fixtures.SSHD, command); diff != "" || first["args"] != nil {
		return fmt.Errorf("the worker's first container: command %q, args %v; want command %q and no args", command, first["args"], fixtures.SSHD)
	}
	return nil
}

// unchanged are the sources of Flyte's jobs with nothing installed: each is
// stored as Flyte made it.
func unchanged() map[string]mutate.Source {
	sources := map[string]mutate.Source{}
	for _, name := range fixtures.FlyteJobs {
		sources[name] = mutate.SourceNone
	}
	return sources
}

// expectUninstalled checks that the release left no webhook configuration
// and no policy, and that Flyte's jobs are stored as Flyte made them once
// the API server has let go of them.
func (c *cluster) expectUninstalled(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName + "-mutating-webhook-configuration"}},
		&admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName + "-worker-command"}},
		&admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName + "-worker-command"}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: ReleaseName + "-warnings"}},
	} {
		// A kind the cluster does not serve (a MutatingAdmissionPolicy before 1.36) holds nothing either.
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			t.Errorf("after helm uninstall, %T %s: want NotFound, got %v", obj, obj.GetName(), err)
		}
	}
	c.waitForJobsStored(ctx, t, unchanged())
}
