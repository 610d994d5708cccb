// Command demo shows the webhook and the admission policy at work on a local
// API server, no cluster needed: it starts kube-apiserver and etcd (envtest),
// installs training-operator's MPIJob CRD, serves and registers the webhook
// as config/default configures it, installs the policy as config/policy-only
// does, creates MPIJobs as Flyte 1.16 builds them (testdata/flyte/v1) through
// each, and prints each worker's command before and after.
// Run it with `make demo`, which finds the binaries and the CRD.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case interrupted:
		fmt.Fprintln(os.Stderr, "interrupted: stopped the API server and removed its files")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) (err error) {
	ctrl.SetLogger(logr.Discard()) // the table below is the demo's output
	fmt.Println("Starting a local kube-apiserver and etcd with training-operator's MPIJob CRD (kubeflow.org/v1),\n" +
		"serving the webhook, registered and configured as config/default installs it, and installing the\n" +
		"admission policy as config/policy-only installs it ...")
	start := time.Now()
	env, err := framework.Start(ctx, "v1")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	// Each install gets the jobs of its own label: one API server holds both.
	const webhook, policy = "demo.mpi.flyte.org/webhook", "demo.mpi.flyte.org/policy"
	if err := install(ctx, env, webhook, policy); err != nil {
		return err
	}
	fmt.Printf("Ready in %.1fs. Creating MPIJobs as Flyte 1.16 builds them (testdata/flyte/v1; the first with the\n"+
		"README's worker command in the worker's args, where Flyte writes a declared one):\n\n", time.Since(start).Seconds())

	// The first task declares the README's worker command: Flyte writes it
	// into the worker's args word for word, as it writes the sshd of
	// flytekitplugins-kfmpi's example, which testdata's task declares.
	readmeCommand := func(b *framework.JobBuilder) *framework.JobBuilder {
		return b.WorkerField("args", framework.AnyList(fixtures.WorkerCommand))
	}
	asBuilt := func(b *framework.JobBuilder) *framework.JobBuilder { return b }
	jobs := []struct {
		task, name string
		declare    func(*framework.JobBuilder) *framework.JobBuilder
	}{
		{"Horovod, Worker(command=README's)", fixtures.HorovodWorkerCommand, readmeCommand},
		{"Horovod, @task(annotations=task-custom)", fixtures.HorovodTaskAnnotations, asBuilt},
		{"v0 task, worker_spec_command", fixtures.LegacyWorkerSpecCommand, asBuilt},
		{"Horovod, no Worker command", fixtures.HorovodNoWorkerCommand, asBuilt},
		{"plain MPI (mpirun)", fixtures.MPIPlain, asBuilt},
	}
	table := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "TASK\tWORKER BEFORE\tWORKER AFTER\tSOURCE\tSOURCE, POLICY ALONE")
	for _, j := range jobs {
		before := j.declare(env.Job("default", j.name)).Obj()
		var after [2]*unstructured.Unstructured
		for i, label := range []string{webhook, policy} {
			job := j.declare(env.Job("default", j.name)).Label(label, "true").Obj()
			if err := env.Client.Create(ctx, job); err != nil { // job becomes the MPIJob as stored
				return fmt.Errorf("creating %s: %w", j.name, err)
			}
			after[i] = job
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\n", j.task, worker(before), worker(after[0]), source(after[0]), source(after[1]))
	}
	if err := table.Flush(); err != nil {
		return err
	}
	fmt.Print(`
Flyte writes a declared worker command into the worker's args, with no command, and training-operator
v1.8 runs ` + "`sleep 365d`" + ` in a worker container without a command: without the webhook, the first three
jobs' workers sleep, and the command their task declares (or their annotation gives) never runs. A task
that declares no worker command needs none: the launcher starts the ranks in the sleeping workers with
kubectl exec, so its job is left as Flyte made it. The policy alone (Kubernetes >= 1.36, no server) stores the same, but reads no
annotation: the second job needs the webhook (README).
Try your own job: bin/webhook preview -f job.yaml
`)
	return nil
}

// install serves the webhook as config/default configures it, for the jobs
// labelled webhook, and installs the policy as config/policy-only does, for
// the jobs labelled policy.
func install(ctx context.Context, env *framework.Env, webhook, policy string) error {
	root, err := fixtures.RepoRoot()
	if err != nil {
		return err
	}
	configured, err := manifests.Render(filepath.Join(root, "config", "default"), "")
	if err != nil {
		return err
	}
	opts, err := framework.ConfiguredOptions(configured)
	if err != nil {
		return err
	}
	if err := env.ServeLabelled(ctx, webhook, opts); err != nil {
		return err
	}
	policyOnly, err := manifests.Render(filepath.Join(root, "config", "policy-only"), "")
	if err != nil {
		return err
	}
	if err := env.LeaveLabelled(ctx, policy); err != nil {
		return err
	}
	return env.InstallPolicies(ctx, policyOnly, policy)
}

// source is the source annotation of a stored job, or (unchanged).
func source(job *unstructured.Unstructured) string {
	if s := job.GetAnnotations()[mutate.AnnotationWorkerCommandSource]; s != "" {
		return s
	}
	return "(unchanged)"
}

// worker describes the first worker container's command and args in one short cell.
func worker(job *unstructured.Unstructured) string {
	containers := framework.WorkerContainers(job)
	if len(containers) == 0 {
		return "(no container)"
	}
	c := containers[0].(map[string]any)
	var parts []string
	for _, field := range []string{"command", "args"} {
		if words, ok := c[field].([]any); ok && len(words) > 0 {
			parts = append(parts, field+"="+abbreviate(words))
		}
	}
	if len(parts) == 0 {
		return "(image default)"
	}
	return strings.Join(parts, " ")
}

// abbreviate shows up to four words, so that a row fits a terminal, and
// quotes a word with blanks.
func abbreviate(words []any) string {
	const shown = 4
	s := make([]string, 0, shown+1)
	for i, w := range words {
		if i == shown {
			s = append(s, fmt.Sprintf("… +%d", len(words)-shown))
			break
		}
		word := fmt.Sprint(w)
		if strings.ContainsAny(word, " \t") {
			word = strconv.Quote(word) // one word, as sh would read it
		}
		s = append(s, word)
	}
	return "[" + strings.Join(s, " ") + "]"
}
