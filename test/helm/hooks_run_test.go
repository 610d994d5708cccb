package helm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// hookRun is what hookRunner did with one hook's Pod or Job.
type hookRun struct {
	// kind and name are the hook's: Pod/flyte-mpi-webhook-helm-test, Job/flyte-mpi-webhook-unregister.
	kind, name, namespace string
	args                  []string
	output                string
	err                   error
	// serviceExisted says whether the webhook's Service still existed when
	// the hook ran, in its namespace.
	serviceExisted bool
}

// hookRunner is what envtest lacks for the chart's hooks: a kubelet that
// runs a hook Pod's, or a Job's, container (the webhook binary's
// subcommand, with its args) as the Pod's ServiceAccount, and records how it
// ended in the Pod's or the Job's status, as the kubelet and the Job
// controller would; and a namespace controller that finishes the deletion
// of helm test's namespace, which Helm waits for. Running as the
// ServiceAccount (impersonated) proves that the hook's RBAC suffices.
type hookRunner struct {
	c      *cluster
	binary string
	config *clientcmdConfig

	mu   sync.Mutex
	done map[types.UID]bool
	runs []hookRun
}

// clientcmdConfig is the admin kubeconfig's path, to derive impersonating ones from.
type clientcmdConfig struct{ path, dir string }

// startHookRunner runs the chart's hooks on c until t ends.
func startHookRunner(t *testing.T, c *cluster) *hookRunner {
	t.Helper()
	r := &hookRunner{c: c, binary: buildWebhook(t), config: &clientcmdConfig{path: c.kubeconfig, dir: t.TempDir()}, done: map[types.UID]bool{}}
	clientset, err := kubernetes.NewForConfig(c.restConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			r.step(ctx, clientset)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	return r
}

// hookSelector selects the hooks' Pods and Jobs, and helm test's namespace.
var hookSelector = client.MatchingLabels{"app.kubernetes.io/part-of": ReleaseName}

// step runs each hook Pod and Job not run yet, and finalizes each deleted
// namespace of helm test's.
func (r *hookRunner) step(ctx context.Context, clientset kubernetes.Interface) {
	pods := &corev1.PodList{}
	if err := r.c.client.List(ctx, pods, hookSelector); err == nil {
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || r.ran(pod.UID) {
				continue
			}
			run := r.run(ctx, "Pod", pod.Namespace, pod.Name, pod.Spec)
			pod.Status.Phase = corev1.PodSucceeded
			if run.err != nil {
				pod.Status.Phase = corev1.PodFailed
			}
			_ = r.c.client.Status().Update(ctx, pod)
		}
	}
	jobs := &batchv1.JobList{}
	if err := r.c.client.List(ctx, jobs, hookSelector); err == nil {
		for i := range jobs.Items {
			job := &jobs.Items[i]
			if job.DeletionTimestamp != nil || job.Status.CompletionTime != nil || r.ran(job.UID) {
				continue
			}
			run := r.run(ctx, "Job", job.Namespace, job.Name, job.Spec.Template.Spec)
			now := metav1.Now()
			job.Status.StartTime = &now
			if run.err == nil {
				job.Status.CompletionTime, job.Status.Succeeded = &now, 1
				job.Status.Conditions = []batchv1.JobCondition{
					{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
					{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
				}
			} else {
				job.Status.Failed = 1
				job.Status.Conditions = []batchv1.JobCondition{
					{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
					{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
				}
			}
			if err := r.c.client.Status().Update(ctx, job); err != nil {
				r.record(hookRun{kind: "Job status", name: job.Name, err: err})
			}
		}
	}
	namespaces := &corev1.NamespaceList{}
	if err := r.c.client.List(ctx, namespaces, hookSelector); err == nil {
		for i := range namespaces.Items {
			ns := &namespaces.Items[i]
			if ns.DeletionTimestamp == nil || len(ns.Spec.Finalizers) == 0 {
				continue
			}
			ns.Spec.Finalizers = nil
			_, _ = clientset.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
		}
	}
}

func (r *hookRunner) ran(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done[uid] {
		return true
	}
	r.done[uid] = true
	return false
}

func (r *hookRunner) record(run hookRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, run)
}

// run runs the pod's one container, /webhook SUBCOMMAND ARGS, as its
// ServiceAccount, with the kubelet's $$ expansion of its args.
func (r *hookRunner) run(ctx context.Context, kind, namespace, name string, spec corev1.PodSpec) hookRun {
	run := hookRun{kind: kind, name: name, namespace: namespace}
	defer func() { r.record(run) }()
	service := &corev1.Service{}
	run.serviceExisted = r.c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ReleaseName + "-webhook-service"}, service) == nil
	container := spec.Containers[0]
	if len(spec.Containers) != 1 || len(container.Command) != 2 || container.Command[0] != "/webhook" {
		run.err = fmt.Errorf("want one container running /webhook SUBCOMMAND, got %v", spec.Containers)
		return run
	}
	for _, arg := range container.Args {
		run.args = append(run.args, strings.ReplaceAll(arg, "$$", "$"))
	}
	if container.Command[1] == "unregister" {
		// The settle gives each API server of a cluster time to drop the
		// configuration from its cache; envtest's one API server drops it
		// within milliseconds, and the uninstalls' creates check that it did.
		// A shorter one saves 1.8 s on each of the suite's 28 uninstalls.
		run.args = append(run.args, "--settle=200ms")
	}
	kubeconfig, err := r.impersonating(namespace, spec.ServiceAccountName)
	if err != nil {
		run.err = err
		return run
	}
	cmd := exec.CommandContext(ctx, r.binary, append([]string{container.Command[1]}, run.args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	run.err = cmd.Run()
	run.output = out.String()
	return run
}

// impersonating writes a kubeconfig that acts as the ServiceAccount.
func (r *hookRunner) impersonating(namespace, account string) (string, error) {
	config, err := clientcmd.LoadFromFile(r.config.path)
	if err != nil {
		return "", err
	}
	for _, user := range config.AuthInfos {
		user.Impersonate = "system:serviceaccount:" + namespace + ":" + account
	}
	path := filepath.Join(r.config.dir, namespace+"-"+account+".kubeconfig")
	return path, clientcmd.WriteToFile(*config, path)
}

// take returns the runs since the last take, and forgets them.
func (r *hookRunner) take() []hookRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs := r.runs
	r.runs = nil
	return runs
}

// helmTest runs helm test, which the hookRunner serves, and checks that the
// test's Pod ran webhook check in namespace as its ServiceAccount, once,
// and passed for each job of the mode; and that the test left its Pod
// alone: no namespace, ServiceAccount, Role or RoleBinding.
func (c *cluster) helmTest(ctx context.Context, t *testing.T, cli helmCLI, namespace, mode string) {
	t.Helper()
	c.hooks.take()
	start := time.Now()
	if err := cli.test(); err != nil {
		t.Errorf("helm test: %v; the hooks ran: %+v", err, c.hooks.take())
		return
	}
	t.Logf("helm test, mode %s: %s", mode, time.Since(start).Round(time.Millisecond))
	runs := c.hooks.take()
	if len(runs) != 1 || runs[0].kind != "Pod" || runs[0].name != testHook || runs[0].err != nil {
		t.Errorf("helm test: want one run of Pod/%s that passed, got %+v", testHook, runs)
		return
	}
	wantLines := []string{"ok   kubeflow.org/" + c.version + ", a task that declares its worker command: stored with command /usr/sbin/sshd -De, args (none) (flyte-worker-args)"}
	if runsWebhook(mode) {
		wantLines = append(wantLines, "ok   kubeflow.org/"+c.version+", a task whose annotation gives its worker command: stored with command /usr/sbin/sshd -De -p 2222, args (none) (worker-spec-command)")
	}
	if diff := strings.Join(wantLines, "\n") + "\n"; runs[0].output != diff {
		t.Errorf("webhook check's output:\n%s\nwant:\n%s", runs[0].output, diff)
	}

	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testHook}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: testHook}},
	} {
		if err := c.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			t.Errorf("after helm test, %T %s: want NotFound, got %v", obj, obj.GetName(), err)
		}
	}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: testHook}, &corev1.Pod{}); err != nil {
		t.Errorf("after helm test, its Pod, for helm test --logs: %v", err)
	}
}

// admissionsDuring creates, with a dry run, one Flyte job after another in
// jobsNamespace while during runs and for settle after it, and returns how
// many the API server admitted and the refusals.
func (c *cluster) admissionsDuring(ctx context.Context, settle time.Duration, during func()) (admitted int, refused []error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			job, err := fixtures.FlyteJob(c.version, "horovod-worker-command")
			if err != nil {
				panic(err)
			}
			job.SetNamespace(jobsNamespace)
			job.SetGenerateName(job.GetName() + "-")
			job.SetName("")
			err = c.client.Create(ctx, job, client.DryRunAll)
			mu.Lock()
			if err == nil {
				admitted++
			} else if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				refused = append(refused, err)
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	during()
	time.Sleep(settle)
	cancel()
	<-stopped
	return admitted, slices.Clone(refused)
}
