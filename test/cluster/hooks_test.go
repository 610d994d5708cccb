package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// The chart's hooks, by name: helm test's objects share one, the
// namespace it makes too; the pre-delete hook's objects another.
const (
	testHook       = release + "-helm-test"
	unregisterHook = release + "-unregister"
	// webhookConfiguration is the release's MutatingWebhookConfiguration.
	webhookConfiguration = release + "-mutating-webhook-configuration"
)

// afterUninstall is how long after helm uninstall returns the suite still
// creates jobs, each of which must be admitted: "right after" it.
const afterUninstall = 10 * time.Second

// helmOutput runs the Helm CLI with args as the README's reader does, and
// returns its output; it fails the spec, with the output, when helm fails.
func helmOutput(ctx context.Context, args ...string) string {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBinary, args...)
	cmd.Env = reader
	out, err := cmd.CombinedOutput()
	fmt.Fprintf(GinkgoWriter, "$ helm %v\n%s\n", args, out)
	Expect(err).NotTo(HaveOccurred(), "helm %v:\n%s", args, out)
	return string(out)
}

// expectHelmTest runs `helm test --logs`, as the README says, on the
// release in mode, and checks that its Pod passed, having had the API
// server store, with a dry run, each job of the mode with its worker
// command (the kubeflow.org/v1 MPIJobs of the training-operator); that the
// test's namespace, ServiceAccount and Role are gone, and its Pod stays,
// for helm test --logs.
func expectHelmTest(ctx context.Context, mode string) {
	GinkgoHelper()
	start := time.Now()
	out := helmOutput(ctx, "test", release, "--namespace", webhookNamespace, "--logs", "--timeout", "3m")
	fmt.Fprintf(GinkgoWriter, "helm test, mode %s: %s\n", mode, time.Since(start).Round(100*time.Millisecond))
	Expect(out).To(MatchRegexp(`TEST SUITE:\s+` + testHook + `\s+Last Started:.*\s+Last Completed:.*\s+Phase:\s+Succeeded`))
	Expect(out).To(ContainSubstring("ok   kubeflow.org/v1, a task that declares its worker command: " +
		"stored with command /usr/sbin/sshd -De, args (none) (flyte-worker-args)"))
	annotated := "ok   kubeflow.org/v1, a task whose annotation gives its worker command: " +
		"stored with command /usr/sbin/sshd -De -p 2222, args (none) (worker-spec-command)"
	if mode == "policy" {
		Expect(out).NotTo(ContainSubstring(annotated), "the policy alone reads no annotation: the test does not ask it to")
	} else {
		Expect(out).To(ContainSubstring(annotated))
	}

	for _, obj := range []client.Object{
		&corev1.Namespace{},
		&corev1.ServiceAccount{},
	} {
		key := client.ObjectKey{Name: testHook}
		if _, ok := obj.(*corev1.ServiceAccount); ok {
			key.Namespace = webhookNamespace
		}
		err := k8sClient.Get(ctx, key, obj)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "after helm test, %T %s: %v", obj, key, err)
	}
	pod := &corev1.Pod{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: webhookNamespace, Name: testHook}, pod)).To(Succeed())
	Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded))
}

// expectAllAdmitted checks that every creation succeeded, whatever the
// worker command the job was stored with, and writes how many were
// created with the declared command (before the API server let go of the
// webhook configuration) and without it (after).
func expectAllAdmitted(outcomes []creation) {
	GinkgoHelper()
	Expect(outcomes).NotTo(BeEmpty())
	var refused []string
	withCommand, without := 0, 0
	for _, o := range outcomes {
		switch {
		case o.err != nil:
			refused = append(refused, fmt.Sprintf("%s: %v", o.name, o.err))
		case slices.Equal(o.workerCommand, fixtures.SSHD):
			withCommand++
		default:
			without++
		}
	}
	fmt.Fprintf(GinkgoWriter, "%d creations: %d refused, %d with the worker command, %d as Flyte made them\n",
		len(outcomes), len(refused), withCommand, without)
	Expect(refused).To(BeEmpty(), "creations refused")
}

// expectUninstalled checks that helm uninstall left no webhook
// configuration and nothing of its pre-delete hook.
func expectUninstalled(ctx context.Context) {
	GinkgoHelper()
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{},
		&batchv1.Job{},
		&corev1.ServiceAccount{},
		&rbacv1.ClusterRole{},
		&rbacv1.ClusterRoleBinding{},
	} {
		key := client.ObjectKey{Name: unregisterHook}
		switch obj.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			key.Name = webhookConfiguration
		case *batchv1.Job, *corev1.ServiceAccount:
			key.Namespace = webhookNamespace
		}
		err := k8sClient.Get(ctx, key, obj)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "after helm uninstall, %T %s: %v", obj, key, err)
	}
}

// uninstallWhileCreating runs helm uninstall while Flyte's jobs are
// created, one every creationInterval, and for afterUninstall after it, and
// checks that each was admitted and that the release left nothing behind.
func uninstallWhileCreating(ctx context.Context) {
	GinkgoHelper()
	jobs := startCreating(namespace(ctx))
	DeferCleanup(jobs.finish)
	start := time.Now()
	helm(ctx, "uninstall", release, "--namespace", webhookNamespace, "--wait", "--timeout", "3m")
	fmt.Fprintf(GinkgoWriter, "helm uninstall: %s\n", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(afterUninstall)
	expectAllAdmitted(jobs.finish())
	expectUninstalled(ctx)
}

// reinstall installs the release again as the README says, into its
// namespace under Pod Security's restricted level as the install spec
// makes it, and waits for both replicas.
func reinstall(ctx context.Context) {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhookNamespace}}
	err := k8sClient.Get(ctx, client.ObjectKeyFromObject(ns), ns)
	if apierrors.IsNotFound(err) {
		ns.Labels = map[string]string{
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
		}
		err = k8sClient.Create(ctx, ns)
	}
	Expect(err).NotTo(HaveOccurred())
	sh(ctx, releaseFiles(imageTar(), chartFile()), forRelease(readme.helm))
	awaitBothReplicas(ctx)
}

// runbookFix is the one command of docs/RUNBOOKS.md for a namespace
// deleted before helm uninstall.
func runbookFix() string {
	GinkgoHelper()
	runbooks, err := os.ReadFile(filepath.Join(sourceDir, "docs", "RUNBOOKS.md"))
	Expect(err).NotTo(HaveOccurred())
	return codeBlock(string(runbooks), "## A namespace deleted before helm uninstall", "sh")
}

// expectNamespaceDeletedFirst deletes the release's namespace, as a
// platform engineer may before helm uninstall, and checks that the
// configuration left behind refuses Flyte's jobs, naming the Service, until
// the runbook's command deletes it; helm uninstall then finds no release.
func expectNamespaceDeletedFirst(ctx context.Context) {
	GinkgoHelper()
	jobs := namespace(ctx)
	create := func(name string) error {
		return k8sClient.Create(ctx, suspendedFlyteJob("v1", jobs, name))
	}
	Expect(create("before")).To(Succeed())
	Expect(k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhookNamespace}})).To(Succeed())
	awaitNamespaceGone(ctx, webhookNamespace)

	err := create("namespace-gone")
	Expect(err).To(HaveOccurred(), "a job created while the configuration calls a Service that is gone")
	fmt.Fprintf(GinkgoWriter, "refused: %v\n", err)
	Expect(err.Error()).To(And(ContainSubstring(webhookName), ContainSubstring(`service "`+release+`-webhook-service" not found`)))

	fix := runbookFix()
	Expect(fix).To(ContainSubstring(webhookConfiguration))
	sh(ctx, GinkgoT().TempDir(), fix)
	Eventually(ctx, func() error {
		return create(fmt.Sprintf("fixed-%d", time.Now().UnixNano()))
	}).WithTimeout(30 * time.Second).WithPolling(poll).Should(Succeed())
}
