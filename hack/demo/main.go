// Command demo shows the webhook at work on a local API server, no cluster
// needed: it starts kube-apiserver and etcd (envtest), installs
// mpi-operator's MPIJob CRD, serves and registers the webhook, creates three
// Flyte-style MPIJobs and prints each worker's command before and after.
// Run it with `make demo`, which finds the binaries and the CRD.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
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
	fmt.Println("Starting a local kube-apiserver and etcd with mpi-operator's MPIJob CRD (kubeflow.org/v2beta1),")
	fmt.Println("and serving the webhook, registered as config/default installs it ...")
	start := time.Now()
	env, err := framework.Start(ctx, "v2beta1")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	fmt.Printf("Ready in %.1fs. Creating three MPIJobs shaped as Flyte's MPI plugin creates them:\n\n", time.Since(start).Seconds())

	jobs := []struct {
		name string
		job  *unstructured.Unstructured
	}{
		{"flytekit Horovod task (workerReplicas.command)",
			env.FlyteJob("default").Annotation(mutate.AnnotationTaskCustom, framework.FlytekitCustom).Obj()},
		{"legacy Horovod task (worker-spec-command)",
			env.FlyteJob("default").Annotation(mutate.AnnotationTaskCustom, `{"numWorkers":2,"numLauncherReplicas":1,"slots":1}`).
				Annotation(mutate.AnnotationWorkerSpecCommand, "/usr/sbin/sshd -De -f /home/jobuser/.sshd_config").Obj()},
		{"Flyte MPI task without annotation",
			env.FlyteJob("default").Obj()},
	}
	table := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "JOB\tWORKER BEFORE\tWORKER AFTER\tSOURCE")
	for _, j := range jobs {
		before := j.job.DeepCopy()
		if err := env.Client.Create(ctx, j.job); err != nil {
			return fmt.Errorf("creating the %s: %w", j.name, err)
		}
		stored := &unstructured.Unstructured{}
		stored.SetGroupVersionKind(j.job.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(j.job), stored); err != nil {
			return err
		}
		source := stored.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
		if source == "" {
			source = "(unchanged)"
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\n", j.name, worker(before), worker(stored), source)
	}
	if err := table.Flush(); err != nil {
		return err
	}
	fmt.Println("\nThe first two workers now run sshd, as Horovod needs; the third kept the launcher's task")
	fmt.Println("command that Flyte copies into every replica. Try your own job: bin/webhook preview -f job.yaml")
	return nil
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

// abbreviate shows up to four words, so that a row fits a terminal.
func abbreviate(words []any) string {
	const shown = 4
	s := make([]string, 0, shown+1)
	for i, w := range words {
		if i == shown {
			s = append(s, fmt.Sprintf("… +%d", len(words)-shown))
			break
		}
		s = append(s, fmt.Sprint(w))
	}
	return "[" + strings.Join(s, " ") + "]"
}
