package envtest_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

var (
	buildOnce   sync.Once
	binary      string
	errBuilding error
)

var _ = AfterSuite(func() {
	if binary != "" {
		Expect(os.RemoveAll(filepath.Dir(binary))).To(Succeed())
	}
})

// webhookBinary builds cmd/webhook once, for the subcommands the chart's
// hooks run; AfterSuite removes it.
func webhookBinary() string {
	GinkgoHelper()
	buildOnce.Do(func() {
		root, err := fixtures.RepoRoot()
		if err != nil {
			errBuilding = err
			return
		}
		dir, err := os.MkdirTemp("", "envtest-webhook-")
		if err != nil {
			errBuilding = err
			return
		}
		binary = filepath.Join(dir, "webhook")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/webhook")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			errBuilding = err
			GinkgoWriter.Printf("go build ./cmd/webhook:\n%s", out)
		}
	})
	Expect(errBuilding).NotTo(HaveOccurred())
	return binary
}

// asServiceAccount creates a ServiceAccount in namespace with rules, in a
// Role of namespace or, for namespace "", a ClusterRole (named after the
// spec's namespace, and left to the API server's end, as the spec's
// namespace is), and returns a kubeconfig that acts as it: what a hook's
// Pod gets from its account.
func (s *spec) asServiceAccount(ctx context.Context, namespace, name string, rules []rbacv1.PolicyRule) string {
	GinkgoHelper()
	accountNamespace := namespace
	if accountNamespace == "" {
		accountNamespace = s.namespace
	}
	c := s.env.Client
	Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: accountNamespace, Name: name}})).To(Succeed())
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: accountNamespace, Name: name}}
	if namespace == "" {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: s.namespace + "-" + name}, Rules: rules}
		Expect(c.Create(ctx, role)).To(Succeed())
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}}
		Expect(c.Create(ctx, binding)).To(Succeed())
	} else {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: rules}
		Expect(c.Create(ctx, role)).To(Succeed())
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
		Expect(c.Create(ctx, binding)).To(Succeed())
	}

	dir := GinkgoT().TempDir()
	admin, err := s.env.WriteKubeConfig(dir)
	Expect(err).NotTo(HaveOccurred())
	config, err := clientcmd.LoadFromFile(admin)
	Expect(err).NotTo(HaveOccurred())
	for _, user := range config.AuthInfos {
		user.Impersonate = "system:serviceaccount:" + accountNamespace + ":" + name
	}
	path := filepath.Join(dir, name+".kubeconfig")
	Expect(clientcmd.WriteToFile(*config, path)).To(Succeed())
	return path
}

// runWebhook runs the webhook binary with args and the kubeconfig, and
// returns its standard output and error, and its error.
func runWebhook(ctx context.Context, kubeconfig string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, webhookBinary(), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// createMPIJobs is the one rule the chart's helm test needs: create MPIJobs
// in its namespace.
var createMPIJobs = []rbacv1.PolicyRule{{APIGroups: []string{"kubeflow.org"}, Resources: []string{"mpijobs"}, Verbs: []string{"create"}}}

// describeHooks declares the specs of the subcommands the chart's hooks
// run: `webhook check` (helm test) and `webhook unregister` (pre-delete), as
// a ServiceAccount with the chart's RBAC alone.
func describeHooks(s *spec) bool {
	return Describe("the chart's hooks", func() {
		It("webhook check passes where the webhook is called, with create on MPIJobs its only right, and stores nothing", func(ctx SpecContext) {
			kubeconfig := s.asServiceAccount(ctx, s.namespace, "check", createMPIJobs)
			stdout, stderr, err := runWebhook(ctx, kubeconfig, "check", "-n", s.namespace, "--mode", "webhook")
			Expect(err).NotTo(HaveOccurred(), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			Expect(stdout).To(And(
				ContainSubstring("ok   kubeflow.org/"+s.version+", a task that declares its worker command: stored with command /usr/sbin/sshd -De, args (none) (flyte-worker-args)"),
				ContainSubstring("ok   kubeflow.org/"+s.version+", a task whose annotation gives its worker command: stored with command /usr/sbin/sshd -De -p 2222, args (none) (worker-spec-command)"),
			))
			s.expectNoJobs(ctx, s.job("horovod-worker-command").Obj())
		})

		It("webhook check fails, naming the namespace, where the webhook is not called", func(ctx SpecContext) {
			excluded := s.env.ExcludedNamespaces()[0]
			Expect(client.IgnoreAlreadyExists(s.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: excluded}}))).To(Succeed())
			kubeconfig := s.asServiceAccount(ctx, excluded, "check-"+s.version, createMPIJobs)
			stdout, _, err := runWebhook(ctx, kubeconfig, "check", "-n", excluded, "--timeout", "2s")
			Expect(err).To(HaveOccurred())
			Expect(stdout).To(And(
				ContainSubstring("FAIL kubeflow.org/"+s.version+", a task that declares its worker command: stored command (none), args /usr/sbin/sshd -De (no source annotation); want command /usr/sbin/sshd -De, args (none) (flyte-worker-args)"),
				ContainSubstring("was not called for it; check that the namespace "+excluded),
			))
		})

		It("webhook check fails, with the API server's answer, without the right to create", func(ctx SpecContext) {
			kubeconfig := s.asServiceAccount(ctx, s.namespace, "no-rights", nil)
			stdout, _, err := runWebhook(ctx, kubeconfig, "check", "-n", s.namespace, "--mpijob-version", s.version, "--timeout", "2s")
			Expect(err).To(HaveOccurred())
			Expect(stdout).To(ContainSubstring(`mpijobs.kubeflow.org is forbidden: User "system:serviceaccount:` + s.namespace + `:no-rights" cannot create resource "mpijobs"`))
		})

		It("webhook unregister deletes the configuration it names, with delete on it its only right, and no other", func(ctx SpecContext) {
			Expect(s.env.InstallCopy(ctx, s.namespace, "https://127.0.0.1:1/unused", func(*admissionregistrationv1.MutatingWebhook) {})).To(Succeed())
			name := s.env.Webhook.Name + "-" + s.namespace
			kubeconfig := s.asServiceAccount(ctx, "", "unregister", []rbacv1.PolicyRule{{
				APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
				ResourceNames: []string{name}, Verbs: []string{"delete"},
			}})

			start := time.Now()
			stdout, stderr, err := runWebhook(ctx, kubeconfig, "unregister", "--name", name, "--settle", "1s")
			Expect(err).NotTo(HaveOccurred(), "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			Expect(time.Since(start)).To(BeNumerically(">=", time.Second), "the settle time")
			Expect(stdout).To(Equal("MutatingWebhookConfiguration " + name + ": deleted, and 1s waited for the API servers to stop calling the webhook\n"))
			err = s.env.Client.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.MutatingWebhookConfiguration{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "after unregister: %v", err)

			stdout, _, err = runWebhook(ctx, kubeconfig, "unregister", "--name", name)
			Expect(err).NotTo(HaveOccurred())
			Expect(stdout).To(Equal("MutatingWebhookConfiguration " + name + ": already gone\n"))

			_, stderr, err = runWebhook(ctx, kubeconfig, "unregister", "--name", s.env.Webhook.Name)
			Expect(err).To(HaveOccurred())
			Expect(stderr).To(ContainSubstring(`cannot delete resource "mutatingwebhookconfigurations" in API group "admissionregistration.k8s.io" at the cluster scope`))
			Expect(s.env.Client.Get(ctx, client.ObjectKey{Name: s.env.Webhook.Name}, &admissionregistrationv1.MutatingWebhookConfiguration{})).To(Succeed())
		})
	})
}
