package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// The modes of an install, the chart's `mode`: which admission answers a
// Flyte MPIJob, and so which jobs a check expects to see changed.
const (
	modeWebhook = "webhook" // the webhook alone: every rule
	modePolicy  = "policy"  // the MutatingAdmissionPolicy alone: the task's declared command, no annotations
	modeBoth    = "both"    // the policy for the declared command, the webhook for the annotated jobs
)

var checkModes = []string{modeWebhook, modePolicy, modeBoth}

// checkCase is one job a check creates: a Flyte task that declares its worker
// command (the policy's rule, and the webhook's), or one that an annotation
// gives it (the webhook's alone).
type checkCase struct {
	name string
	// annotated gives the worker command by mpi.flyte.org/worker-spec-command
	// rather than by the worker's args.
	annotated bool
}

var (
	declaredCase  = checkCase{name: "a task that declares its worker command"}
	annotatedCase = checkCase{name: "a task whose annotation gives its worker command", annotated: true}
)

// checkCases are the jobs a check creates in mode: the policy alone reads
// no annotation, so a job that carries one is left as Flyte made it there.
func checkCases(mode string) []checkCase {
	if mode == modePolicy {
		return []checkCase{declaredCase}
	}
	return []checkCase{declaredCase, annotatedCase}
}

// The worker commands of the check's jobs, distinct, so that the stored job
// says which rule answered.
var (
	checkDeclaredCommand  = []string{"/usr/sbin/sshd", "-De"}
	checkAnnotatedCommand = "/usr/sbin/sshd -De -p 2222"
	// checkLauncherArgs are a Flyte launcher's: the task's entrypoint, which
	// a worker of a task that declares no command runs too.
	checkLauncherArgs = []string{"mpirun", "--allow-run-as-root", "pyflyte-execute", "--inputs", "s3://flyte-mpi-webhook-check/inputs.pb"}
)

// checkJob is the MPIJob of version that c creates in namespace, labelled
// with jobLabels, its containers named containerName and running image
// (never pulled: the job is only dry-run).
func checkJob(c checkCase, version, namespace, containerName, image string, jobLabels map[string]string) *unstructured.Unstructured {
	container := func(args []string) map[string]any {
		return map[string]any{"name": containerName, "image": image, "args": anySlice(args)}
	}
	replica := func(args []string) map[string]any {
		return map[string]any{
			"replicas":      int64(1),
			"restartPolicy": "Never",
			"template": map[string]any{
				"metadata": map[string]any{"labels": anyMap(jobLabels)},
				"spec":     map[string]any{"containers": []any{container(args)}},
			},
		}
	}
	workerArgs := checkDeclaredCommand
	if c.annotated {
		workerArgs = checkLauncherArgs // as Flyte makes a task that declares none
	}
	job := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"slotsPerWorker": int64(1),
			"runPolicy":      map[string]any{},
			"mpiReplicaSpecs": map[string]any{
				"Launcher": replica(checkLauncherArgs),
				"Worker":   replica(workerArgs),
			},
		},
	}}
	job.SetGroupVersionKind(schema.GroupVersionKind{Group: mutate.MPIJobGroup, Version: version, Kind: mutate.MPIJobKind})
	job.SetNamespace(namespace)
	job.SetGenerateName("flyte-mpi-webhook-check-")
	job.SetLabels(jobLabels)
	if c.annotated {
		job.SetAnnotations(map[string]string{mutate.AnnotationWorkerSpecCommand: checkAnnotatedCommand})
	}
	return job
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// checkLabelValue is the value of a label a selector only needs to exist.
const checkLabelValue = "flyte-mpi-webhook-check"

// labelsFor returns labels that every selector selects: each label a
// requirement needs to exist, with its first value when it names some (In,
// =) and checkLabelValue otherwise; none for a requirement that a missing
// label meets (NotIn, !=, !). An error names a selector they do not meet.
func labelsFor(selectors ...labels.Selector) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range selectors {
		requirements, _ := s.Requirements()
		for _, r := range requirements {
			switch r.Operator() {
			case selection.Exists:
				if _, ok := out[r.Key()]; !ok {
					out[r.Key()] = checkLabelValue
				}
			case selection.In, selection.Equals, selection.DoubleEquals:
				values := r.Values().List() // sorted
				if v, ok := out[r.Key()]; !ok || !slices.Contains(values, v) {
					out[r.Key()] = values[0]
				}
			}
		}
	}
	for _, s := range selectors {
		if !s.Matches(labels.Set(out)) {
			return nil, fmt.Errorf("no labels meet both the Flyte task selector and the webhook's object selector (%s)", s)
		}
	}
	return out, nil
}

// workerCommand is what a job's first worker container runs, and the source
// its annotation records: what a check compares.
type workerCommand struct {
	Command []string
	Args    []string
	Source  string
}

func (w workerCommand) String() string {
	source := w.Source
	if source == "" {
		source = "no source annotation"
	}
	return fmt.Sprintf("command %s, args %s (%s)", quotedWords(w.Command), quotedWords(w.Args), source)
}

// workerCommandOf reads a job's workerCommand.
func workerCommandOf(job map[string]any) workerCommand {
	var w workerCommand
	w.Source, _, _ = unstructured.NestedString(job, "metadata", "annotations", mutate.AnnotationWorkerCommandSource)
	containers, _, _ := unstructured.NestedSlice(job, "spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers")
	if len(containers) > 0 {
		if first, ok := containers[0].(map[string]any); ok {
			w.Command, _, _ = unstructured.NestedStringSlice(first, "command")
			w.Args, _, _ = unstructured.NestedStringSlice(first, "args")
		}
	}
	return w
}

// expectedWorkerCommand is what the webhook, with opts, stores for job: the
// server's own handler answers it, as `webhook preview` does.
func expectedWorkerCommand(opts mutate.Options, job *unstructured.Unstructured) (workerCommand, error) {
	object, err := json.Marshal(job.Object)
	if err != nil {
		return workerCommand{}, err
	}
	resp := previewCreate(admission.NewHandler(opts, defaultLimits().review, nil), object, job.GroupVersionKind())
	if !resp.Allowed {
		return workerCommand{}, fmt.Errorf("the webhook would refuse the check's job: %s", resp.Result.Message)
	}
	if len(resp.Patch) > 0 {
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			return workerCommand{}, err
		}
		if object, err = patch.Apply(object); err != nil {
			return workerCommand{}, err
		}
	}
	var patched map[string]any
	if err := json.Unmarshal(object, &patched); err != nil {
		return workerCommand{}, err
	}
	return workerCommandOf(patched), nil
}

// compareWorkerCommand returns nil when the API server stored want, and
// otherwise an error saying what it stored instead and why that may be.
func compareWorkerCommand(got, want workerCommand, namespace string) error {
	if slices.Equal(got.Command, want.Command) && slices.Equal(got.Args, want.Args) && got.Source == want.Source {
		return nil
	}
	why := ""
	if got.Source == "" {
		why = fmt.Sprintf(": nothing changed the job, so the webhook or the policy was not called for it; check that the "+
			"namespace %s and the job's labels are selected (webhook.namespaceSelectorExpressions, webhook.objectSelector) "+
			"and that the MutatingWebhookConfiguration or the MutatingAdmissionPolicyBinding exists", namespace)
	}
	return fmt.Errorf("stored %s; want %s%s", got, want, why)
}

// servedMPIJobVersions returns the MPIJob versions the API server serves,
// of mutate.MPIJobVersions, in that order.
func servedMPIJobVersions(d discovery.DiscoveryInterface) ([]string, error) {
	var served []string
	for _, version := range mutate.MPIJobVersions {
		resources, err := d.ServerResourcesForGroupVersion(mutate.MPIJobGroup + "/" + version)
		if err != nil {
			continue // not served: the API server answers 404
		}
		for _, r := range resources.APIResources {
			if r.Name == mutate.MPIJobResource {
				served = append(served, version)
			}
		}
	}
	if len(served) == 0 {
		return nil, errors.New("the API server serves no MPIJob (kubeflow.org/v1 or v2beta1): install the MPI operator, or its CRD, first")
	}
	return served, nil
}

// runCheck creates Flyte MPIJobs with a server-side dry run and fails unless
// the API server's answer carries the worker command that the install's
// mode gives them: what the chart's `helm test` runs.
func runCheck(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := subcommandFlags("check", "usage: webhook check -n NAMESPACE [flags] [decision flags]\n\n"+
		"Creates, with a server-side dry run (nothing is stored), a Flyte MPIJob whose task declares its worker\n"+
		"command and, unless --mode is policy, one whose annotation gives it, in NAMESPACE, for each MPIJob\n"+
		"version the API server serves; fails unless the API server's answer carries the worker command that\n"+
		"the webhook, with the decision flags given, would store. It needs to create MPIJobs in NAMESPACE, and\n"+
		"reads the API server's address and credentials as kubectl does (KUBECONFIG, or the Pod's account).", stderr)
	namespace := fs.String("n", "", "the namespace to create the jobs in: one the webhook and the policy are called for")
	mode := fs.String("mode", modeWebhook, fmt.Sprintf("what answers Flyte's MPIJobs: one of %v, as the chart's mode", checkModes))
	version := fs.String("mpijob-version", "", `the MPIJob version to create: v1 or v2beta1 (default "": each the API server serves)`)
	image := fs.String("image", "flyte-mpi-webhook-check", "the image of the jobs' containers, never pulled: one the cluster's admission admits")
	objectSelector := fs.String("object-selector", "", "the webhook's objectSelector, as JSON, which the jobs' labels must meet (default: none)")
	timeout := fs.Duration("timeout", time.Minute, "how long to try, while the API server refuses the jobs or has not yet applied the install")
	opts := mutate.DefaultOptions()
	bindDecisionFlags(fs, &opts)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("check takes no arguments, got %q", fs.Args())
	}
	if *namespace == "" {
		return errors.New("-n is required: the namespace to create the jobs in")
	}
	if !slices.Contains(checkModes, *mode) {
		return fmt.Errorf("--mode %q: want one of %v", *mode, checkModes)
	}
	if *version != "" && !slices.Contains(mutate.MPIJobVersions, *version) {
		return fmt.Errorf("--mpijob-version %q: want one of %v", *version, mutate.MPIJobVersions)
	}
	selectors := []labels.Selector{opts.FlyteTaskSelector}
	if *objectSelector != "" {
		var ls metav1.LabelSelector
		if err := json.Unmarshal([]byte(*objectSelector), &ls); err != nil {
			return fmt.Errorf("--object-selector: %w", err)
		}
		s, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil {
			return fmt.Errorf("--object-selector: %w", err)
		}
		selectors = append(selectors, s)
	}
	jobLabels, err := labelsFor(selectors...)
	if err != nil {
		return err
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	versions := []string{*version}
	if *version == "" {
		d, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return err
		}
		if versions, err = servedMPIJobVersions(d); err != nil {
			return err
		}
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var failed []error
	for _, v := range versions {
		for _, cs := range checkCases(*mode) {
			job := checkJob(cs, v, *namespace, opts.ContainerName, *image, jobLabels)
			want, err := expectedWorkerCommand(opts, job)
			if err != nil {
				return err
			}
			got, err := dryRunCreate(ctx, c, job, want, *namespace)
			what := fmt.Sprintf("%s/%s, %s", mutate.MPIJobGroup, v, cs.name)
			if err != nil {
				fmt.Fprintf(stdout, "FAIL %s: %v\n", what, err)
				failed = append(failed, fmt.Errorf("%s: %w", what, err))
				continue
			}
			fmt.Fprintf(stdout, "ok   %s: stored with %s\n", what, got)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of the dry-run creates were not answered as the install's mode %s answers: %w", len(failed), *mode, errors.Join(failed...))
	}
	return nil
}

// dryRunCreate creates job with a server-side dry run until the API server
// stores want, or ctx ends: the API server applies a configuration or
// policy just installed a moment later, and a webhook's pods may still be
// starting. It returns what the API server stored, or why not.
func dryRunCreate(ctx context.Context, c client.Client, job *unstructured.Unstructured, want workerCommand, namespace string) (workerCommand, error) {
	var got workerCommand
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		stored := job.DeepCopy()
		if err := c.Create(ctx, stored, client.DryRunAll); err != nil {
			if ctx.Err() == nil || lastErr == nil {
				lastErr = err
			}
			// Refused for good: no right to create, or the job denied.
			return false, forbidden(err)
		}
		got = workerCommandOf(stored.Object)
		lastErr = compareWorkerCommand(got, want, namespace)
		return lastErr == nil, nil
	})
	if err != nil && lastErr != nil {
		return got, lastErr
	}
	return got, err
}

// forbidden returns err when the API server refused the create for good
// (403: RBAC, or a webhook or policy that denies the job), and nil for what
// may pass on a later try.
func forbidden(err error) error {
	if apierrors.IsForbidden(err) {
		return err
	}
	return nil
}
