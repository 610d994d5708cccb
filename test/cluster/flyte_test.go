package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// Flyte's own controller on the cluster: cluster.sh runs flytepropeller
// v1.16.8 (test/cluster/propeller, with flyteplugins' mpi plugin) beside the
// operator, without flyteadmin, and the suite creates FlyteWorkflows as
// flyteadmin would: one task node around a task of hack/flyte-testdata's
// cases, built by propeller's compiler (propeller workflow). The verdict is
// what Flyte shows its user: the FlyteWorkflow's status.

// propellerBinary is test/cluster/propeller's binary, whose workflow
// subcommand prints a FlyteWorkflow; propellerLog is the log of the one
// cluster.sh runs.
var propellerBinary, propellerLog string

// patchedPropellerBinary is the same flytepropeller built with the upstream
// fix in flyteplugins' mpi plugin (hack/upstream, docs/UPSTREAM.md), which
// usePropeller runs in place of propellerBinary's.
var patchedPropellerBinary string

// workflowPhases are flytepropeller's WorkflowPhase values, in their order
// (v1alpha1.WorkflowPhase), as its String names them.
var workflowPhases = []string{"Ready", "Running", "Succeeding", "Succeeded", "Failing", "Failed", "Aborted", "HandlingFailureNode"}

// nodePhases are flytepropeller's NodePhase values, in their order (v1alpha1.NodePhase).
var nodePhases = []string{"NotYetStarted", "Queued", "Running", "Failing", "Succeeding", "Succeeded", "Failed",
	"Skipped", "RetryableFailure", "TimingOut", "TimedOut", "DynamicRunning", "Recovered"}

// phaseName names phase of names, or says it is unknown.
func phaseName(names []string, phase int) string {
	if phase < 0 || phase >= len(names) {
		return fmt.Sprintf("unknown phase %d", phase)
	}
	return names[phase]
}

// executionError is a FlyteWorkflow's or a node's error: flyteidl's core.ExecutionError.
type executionError struct {
	Code    string `json:"code"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// flyteWorkflowStatus is what the suite reads of a FlyteWorkflow: its
// creation, and the status flytepropeller writes.
type flyteWorkflowStatus struct {
	Metadata struct {
		CreationTimestamp metav1.Time `json:"creationTimestamp"`
	} `json:"metadata"`
	Status struct {
		Phase     int             `json:"phase"`
		StoppedAt *metav1.Time    `json:"stoppedAt"`
		Message   string          `json:"message"`
		Error     *executionError `json:"error"`
		Nodes     map[string]struct {
			Phase    int             `json:"phase"`
			Attempts int             `json:"attempts"`
			Error    *executionError `json:"error"`
		} `json:"nodeStatus"`
	} `json:"status"`
}

// workflowOutcome is a FlyteWorkflow's end, as Flyte shows it: the
// workflow's phase, and its task node's phase, attempts and error.
type workflowOutcome struct {
	Phase     string
	NodePhase string
	// Attempts is how many attempts the task made: its node status's
	// attempts, which counts the retries, and one.
	Attempts int
	// ErrorCode and ErrorKind are the node's error's code and kind ("" when it has none).
	ErrorCode, ErrorKind string
	// Error is the node's error message ("" when it has none).
	Error string
}

// taskNode is the node of the task in every FlyteWorkflow the suite runs
// (hack/flyte-testdata's generator.NodeID).
const taskNode = "n0"

// flyteWorkflow is a FlyteWorkflow the suite runs: a task, the retries it
// allows, and the outcome Flyte must show.
type flyteWorkflow struct {
	task    task
	retries int
	// want is the outcome; its Error is a part of the node's error message.
	want workflowOutcome
	// patched says that the flytepropeller running it has the upstream fix
	// (usePropeller(ctx, patchedPropellerBinary)): the worker command its
	// task declares is the worker's command as Flyte made the job, which no
	// add-on changes.
	patched bool
}

// succeeded is the outcome of a workflow whose task succeeds at its first attempt.
var succeeded = workflowOutcome{Phase: "Succeeded", NodePhase: "Succeeded", Attempts: 1}

// mpiInvalidAnnotation is an MPI task whose job carries the annotation
// mpi.flyte.org/task-custom with a value that is no task custom:
// @task(annotations=...), which flytepropeller copies onto the MPIJob.
var mpiInvalidAnnotation = task{name: "an MPI task whose annotation mpi.flyte.org/task-custom is not JSON",
	flyteCase: fixtures.MPIPlain, launch: []string{"-task-annotation", mutate.AnnotationTaskCustom + "=not JSON"},
	source: mutate.SourceNone}

// withAddOn are the workflows the suite runs with the add-on installed, each
// allowing one retry: an MPI task that declares sshd, one that declares
// nothing, and a Horovod task that declares sshd, which succeed; and
// mpiInvalidAnnotation, which ends with invalid.
func withAddOn(invalid workflowOutcome) []flyteWorkflow {
	return []flyteWorkflow{
		{task: mpiDeclared, retries: 1, want: succeeded},
		{task: mpiNothing, retries: 1, want: succeeded},
		{task: horovodDeclared, retries: 1, want: succeeded},
		{task: mpiInvalidAnnotation, retries: 1, want: invalid},
	}
}

// createWorkflow creates the FlyteWorkflow of w's task, built by
// flytepropeller's compiler, in a namespace of its own, and returns it.
func createWorkflow(ctx context.Context, w flyteWorkflow) *unstructured.Unstructured {
	GinkgoHelper()
	ns := namespace(ctx)
	args := append([]string{"workflow", "-namespace", ns, "-case", w.task.flyteCase, "-cpu", taskCPU,
		"-retries", fmt.Sprint(w.retries)}, w.task.launch...)
	wf := &unstructured.Unstructured{}
	Expect(wf.UnmarshalJSON([]byte(run(ctx, time.Minute, propellerBinary, args...)))).To(Succeed())
	Expect(k8sClient.Create(ctx, wf)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		if CurrentSpecReport().Failed() {
			dumpPropellerLog(ns)
		}
	})
	return wf
}

// workflowEnd waits until flytepropeller has brought wf to a final phase,
// and returns its outcome, the execution's error message ("" if none), and
// the time from its creation to that phase.
func workflowEnd(ctx context.Context, wf *unstructured.Unstructured) (workflowOutcome, string, time.Duration) {
	GinkgoHelper()
	var status flyteWorkflowStatus
	Eventually(ctx, func(g Gomega) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(wf.GroupVersionKind())
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(wf), got)).To(Succeed())
		b, err := got.MarshalJSON()
		g.Expect(err).NotTo(HaveOccurred())
		status = flyteWorkflowStatus{}
		g.Expect(json.Unmarshal(b, &status)).To(Succeed())
		g.Expect(status.Status.StoppedAt).NotTo(BeNil(), "the FlyteWorkflow is %s: %s",
			phaseName(workflowPhases, status.Status.Phase), status.Status.Message)
	}).WithTimeout(2 * jobTimeout).WithPolling(2 * poll).Should(Succeed())
	node := status.Status.Nodes[taskNode]
	outcome := workflowOutcome{Phase: phaseName(workflowPhases, status.Status.Phase),
		NodePhase: phaseName(nodePhases, node.Phase), Attempts: node.Attempts + 1}
	if node.Error != nil {
		outcome.ErrorCode, outcome.ErrorKind, outcome.Error = node.Error.Code, node.Error.Kind, node.Error.Message
	}
	var executionError string
	if status.Status.Error != nil {
		executionError = status.Status.Error.Message
	}
	return outcome, executionError, status.Status.StoppedAt.Sub(status.Metadata.CreationTimestamp.Time)
}

// runWorkflows creates every workflow at once, each in a namespace of its
// own, and expects each to end as it wants: its phase, its node's phase and
// attempts, and its error. A workflow whose task succeeds also ran as its
// task asked (expectRanIn): its ranks in workers that run sshd when it
// declares sshd, `sleep 365d` when not. Each one's time from creation to its
// final phase is reported.
func runWorkflows(ctx context.Context, mode string, workflows ...flyteWorkflow) {
	GinkgoHelper()
	created := make([]*unstructured.Unstructured, len(workflows))
	for i, w := range workflows {
		created[i] = createWorkflow(ctx, w)
	}
	for i, w := range workflows {
		By(w.task.name)
		got, executionError, took := workflowEnd(ctx, created[i])
		AddReportEntry(fmt.Sprintf("flytepropeller, %s: %s", mode, w.task.name),
			fmt.Sprintf("%s in %s (node %s, %d attempts)", got.Phase, took, got.NodePhase, got.Attempts))
		if wantError := w.want.Error; wantError != "" {
			// Flyte shows the node's error as the execution's.
			Expect(got.Error).To(ContainSubstring(wantError), "the node's error")
			Expect(executionError).To(ContainSubstring(wantError), "the execution's error")
			got.Error = wantError
		}
		Expect(got).To(Equal(w.want), "what Flyte shows of the workflow of %s", w.task.name)
		if w.want.Phase != "Succeeded" {
			continue
		}
		expectRanAsAsked(ctx, w, onlyJob(ctx, created[i].GetNamespace()))
	}
}

// expectRanAsAsked checks that job, the stored job of w, which succeeded,
// ran as its task asked (expectRanIn): its ranks in workers that run sshd
// when it declares sshd, as Flyte with the fix made the job when w.patched,
// as the add-on restored it when not; `sleep 365d` when it declares nothing.
func expectRanAsAsked(ctx context.Context, w flyteWorkflow, job *unstructured.Unstructured) {
	GinkgoHelper()
	switch {
	case w.patched && w.task.source == mutate.SourceFlyteWorkerArgs:
		expectFlyteCommand(job)
		expectRanIn(ctx, job, fixtures.SSHD)
	case w.task.declares():
		expectRestored(job, w.task.source)
		expectRanIn(ctx, job, fixtures.SSHD)
	default:
		expectRanIn(ctx, job, sleep365d)
	}
}

// expectFlyteCommand checks that the stored job's worker runs sshd, the
// command its task declared, as Flyte with the upstream fix made the job:
// its command, no args, and no source annotation, whatever add-on is installed.
func expectFlyteCommand(job *unstructured.Unstructured) {
	GinkgoHelper()
	command, _, _ := unstructured.NestedStringSlice(workerContainer(job), "command")
	_, hasArgs := workerContainer(job)["args"]
	Expect(command).To(Equal(fixtures.SSHD))
	Expect(hasArgs).To(BeFalse(), "the worker keeps args beside its command")
	Expect(job.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
}

// usePropeller runs flytepropeller from binary in place of the one running,
// until the spec ends, when the first, propellerBinary, runs again
// (cluster.sh switch-propeller: the same configuration, its log at
// propellerLog).
func usePropeller(ctx context.Context, binary string) {
	GinkgoHelper()
	switchPropeller(ctx, binary)
	DeferCleanup(switchPropeller, propellerBinary)
}

// switchPropeller stops the flytepropeller running and runs the one of
// binary (cluster.sh switch-propeller), until it answers.
func switchPropeller(ctx context.Context, binary string) {
	GinkgoHelper()
	run(ctx, 3*time.Minute, env("CLUSTER_SCRIPT"), "switch-propeller", binary)
}

// patchedWorkflows are the workflows the suite runs under patched
// flytepropeller, each allowing one retry and wanting Succeeded at the
// first attempt: the MPI task that declares sshd, whose workflow fails
// without the add-on and the fix, the Horovod one, one that declares
// nothing, and those of more.
func patchedWorkflows(more ...task) []flyteWorkflow {
	var workflows []flyteWorkflow
	for _, t := range append([]task{mpiDeclared, horovodDeclared, mpiNothing}, more...) {
		workflows = append(workflows, flyteWorkflow{task: t, retries: 1, want: succeeded, patched: true})
	}
	return workflows
}

// dumpPropellerLog writes flytepropeller's lines about namespace to the spec's output.
func dumpPropellerLog(namespace string) {
	log, err := os.ReadFile(propellerLog)
	if err != nil {
		fmt.Fprintf(GinkgoWriter, "reading flytepropeller's log: %v\n", err)
		return
	}
	fmt.Fprintf(GinkgoWriter, "--- flytepropeller's log, on namespace %s:\n", namespace)
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, namespace) {
			fmt.Fprint(GinkgoWriter, line)
		}
	}
}
