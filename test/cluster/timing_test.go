package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// What a Flyte user waits (docs/UPSTREAM.md): the workflow of mpiDeclared,
// which fails without the add-on and without the fix, timed alone under
// each of three arms, arm by arm, round after round.

// timingLabel is the label of the timing spec, which runs only when the
// label filter asks for it (onlyWhenAsked).
const timingLabel = "timing"

// timingRounds is how many times each arm runs.
const timingRounds = 3

// timingArm is a way of running the workflow: which flytepropeller, which add-on.
type timingArm struct {
	// name names the arm in the table.
	name string
	// patched says that flytepropeller runs with the upstream fix.
	patched bool
	// addOn is the chart's mode, "webhook" or "policy"; "" for no add-on at all.
	addOn string
}

// timingArms are the arms, in the order each round runs them.
var timingArms = []timingArm{
	{name: "the fix alone", patched: true}, // patched flytepropeller, nothing installed
	{name: "webhook", addOn: "webhook"},    // flytepropeller v1.16.8 as published
	{name: "policy", addOn: "policy"},      // the same
}

// timedRun is what one run of the workflow took, to the second (the API's timestamps).
type timedRun struct {
	arm   string
	round int
	// workflow is from the FlyteWorkflow's creation to its Succeeded.
	workflow time.Duration
	// toJob is from the FlyteWorkflow's creation to its MPIJob's: admission included.
	toJob time.Duration
	// toRunning is from the MPIJob's creation to its Running condition.
	toRunning time.Duration
}

// onlyWhenAsked skips the spec unless the label filter asks for label: it
// selects a spec with label, and not a spec without labels. The timing spec
// takes minutes, and its table is a measurement, not a check: the default
// run (no filter) and a filter such as '!upstream' skip it.
func onlyWhenAsked(label string) {
	filter := GinkgoLabelFilter()
	if !Label(label).MatchesLabelFilter(filter) || (Labels{}).MatchesLabelFilter(filter) {
		Skip(fmt.Sprintf("runs only when the label filter asks for it: -ginkgo.label-filter=%s", label))
	}
}

// timingSpec installs, switches and removes what each arm needs, starting
// and ending with no add-on and flytepropeller v1.16.8, and runs the
// workflow of mpiDeclared alone under each arm, arm by arm, timingRounds
// rounds; each run must end Succeeded at its first attempt. It prints the
// table of the runs and each arm's medians.
func timingSpec(ctx SpecContext) {
	onlyWhenAsked(timingLabel)
	installed, patched := false, false
	DeferCleanup(func(ctx context.Context) {
		if patched {
			switchPropeller(ctx, propellerBinary)
		}
		if installed {
			// An install that failed half-way may have left no release.
			helm(ctx, "uninstall", release, "--namespace", webhookNamespace, "--ignore-not-found", "--wait", "--timeout", "3m")
		}
		// The README's helm install created the namespace; the install spec creates it again.
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: webhookNamespace}}))).To(Succeed())
		awaitNamespaceGone(ctx, webhookNamespace)
	})
	var runs []timedRun
	for round := 1; round <= timingRounds; round++ {
		for _, arm := range timingArms {
			By(fmt.Sprintf("round %d: %s", round, arm.name))
			if arm.patched != patched {
				binary := propellerBinary
				if arm.patched {
					binary = patchedPropellerBinary
				}
				switchPropeller(ctx, binary)
				patched = arm.patched
			}
			switch arm.addOn {
			case "":
				if installed {
					helm(ctx, "uninstall", release, "--namespace", webhookNamespace, "--wait", "--timeout", "3m")
					installed = false
				}
				awaitStoredAsCreated(ctx)
			case "webhook":
				// The README's Helm block: the image and the chart pushed again (the same digests), installed.
				installed = true
				sh(ctx, releaseFiles(imageTar(), chartFile()), forRelease(readme.helm))
				awaitBothReplicas(ctx)
				awaitPolicyLoaded(ctx, "v1") // the webhook's answer, stored as the policy's would be
			case "policy":
				helmUpgrade(ctx, "mode=policy")
				awaitNoWebhookPods(ctx)
				awaitPolicyLoaded(ctx, "v1")
			}
			runs = append(runs, timeWorkflow(ctx, arm, round))
		}
	}
	table := timingTable(runs)
	fmt.Fprint(GinkgoWriter, table)
	AddReportEntry("what a Flyte user waits", table)
}

// timeWorkflow runs the workflow of mpiDeclared alone under arm, expects it
// Succeeded at its first attempt and run as its task asked, and returns its times.
func timeWorkflow(ctx context.Context, arm timingArm, round int) timedRun {
	GinkgoHelper()
	w := flyteWorkflow{task: mpiDeclared, retries: 1, want: succeeded, patched: arm.patched}
	wf := createWorkflow(ctx, w)
	got, _, took := workflowEnd(ctx, wf)
	Expect(got).To(Equal(succeeded), "round %d, %s: what Flyte shows of the workflow", round, arm.name)
	job := onlyJob(ctx, wf.GetNamespace())
	expectRanAsAsked(ctx, w, job)
	// The training-operator keeps the Running condition's time when the job
	// succeeds (its status False from then on).
	var running time.Time
	_, conditions := readConditions(ctx, Default, job)
	for _, c := range conditions {
		if c["type"] == "Running" {
			t, err := time.Parse(time.RFC3339, fmt.Sprint(c["lastTransitionTime"]))
			Expect(err).NotTo(HaveOccurred(), "the MPIJob's Running condition: %v", c)
			running = t
		}
	}
	Expect(running).NotTo(BeZero(), "the MPIJob has no Running condition: %v", conditions)
	// wf is as the API server stored it (createWorkflow's Create), with its creation.
	r := timedRun{arm: arm.name, round: round, workflow: took,
		toJob:     job.GetCreationTimestamp().Sub(wf.GetCreationTimestamp().Time),
		toRunning: running.Sub(job.GetCreationTimestamp().Time)}
	fmt.Fprintf(GinkgoWriter, "round %d, %s: Succeeded in %s (the job created after %s, Running %s after that)\n",
		round, arm.name, r.workflow, r.toJob, r.toRunning)
	// The job's workers run on after it succeeds (cleanPodPolicy None, the
	// operator's default): its namespace goes now, and the next run waits
	// until its Pods are gone, to have the node to itself.
	ns := wf.GetNamespace()
	Expect(k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	Eventually(ctx, func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
	return r
}

// awaitStoredAsCreated waits until no add-on changes a Flyte MPIJob that
// declares sshd: one is stored, suspended, with no worker command, as
// Flyte made it (neither webhook nor policy is there any more).
func awaitStoredAsCreated(ctx context.Context) {
	GinkgoHelper()
	ns := namespace(ctx)
	Eventually(ctx, func(g Gomega) {
		job := suspendedFlyteJob("v1", ns, fmt.Sprintf("probe-%d", time.Now().UnixNano()))
		g.Expect(k8sClient.Create(ctx, job)).To(Succeed())
		g.Expect(workerContainer(job)).NotTo(HaveKey("command"))
		args, _, _ := unstructured.NestedStringSlice(workerContainer(job), "args")
		g.Expect(args).To(Equal(fixtures.SSHD))
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
}

// awaitNoWebhookPods waits until no webhook Pod is left (mode policy): the
// run after it has the node to itself, as in the other arms.
func awaitNoWebhookPods(ctx context.Context) {
	GinkgoHelper()
	Eventually(ctx, func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(webhookNamespace))).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// timingTable is the runs as a Markdown table (arm, round, seconds), and
// each arm's medians, to paste into docs/UPSTREAM.md.
func timingTable(runs []timedRun) string {
	var b strings.Builder
	b.WriteString("\n| arm | round | workflow, create to `Succeeded` (s) | workflow's create to the job's (s) | job, create to `Running` (s) |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", r.arm, r.round, seconds(r.workflow), seconds(r.toJob), seconds(r.toRunning))
	}
	b.WriteString("\n| arm | median, workflow (s) | median, to the job (s) | median, job to `Running` (s) |\n|---|---|---|---|\n")
	for _, arm := range timingArms {
		var workflow, toJob, toRunning []time.Duration
		for _, r := range runs {
			if r.arm == arm.name {
				workflow, toJob, toRunning = append(workflow, r.workflow), append(toJob, r.toJob), append(toRunning, r.toRunning)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", arm.name, seconds(median(workflow)), seconds(median(toJob)), seconds(median(toRunning)))
	}
	return b.String()
}

// median is the middle of ds, or the mean of the two middle ones; 0 when ds is empty.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Sorted(slices.Values(ds))
	if len(ds)%2 == 1 {
		return ds[len(ds)/2]
	}
	return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
}

// seconds writes d in seconds: whole, as the API's timestamps are, unless a median halves them.
func seconds(d time.Duration) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), ".0")
}
