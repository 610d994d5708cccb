package envtest_test

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// The three installs, each routed to the jobs that carry its label, so that
// one API server holds them side by side: the webhook alone as config/default
// configures it, the policy alone (config/policy-only, no webhook), and both
// (config/default-with-policy).
const (
	webhookAloneLabel = "test.mpi.flyte.org/webhook-alone"
	policyAloneLabel  = "test.mpi.flyte.org/policy-alone"
	bothLabel         = "test.mpi.flyte.org/both"
	// noAdmissionLabel: neither webhook nor policy, the job as the API server stores it unchanged.
	noAdmissionLabel = "test.mpi.flyte.org/no-admission"
)

// arms are the installs a job is created through.
var arms = []string{webhookAloneLabel, policyAloneLabel, bothLabel, noAdmissionLabel}

// admitted is what one install did with one job: the job as stored, without
// what the API server sets, or the error of the create; and the warnings.
type admitted struct {
	Stored   *unstructured.Unstructured
	Err      string
	Warnings []string
}

// policyWarning is the prefix the API server puts before a ValidatingAdmissionPolicy's message.
var policyWarning = regexp.MustCompile(`^Validation failed for ValidatingAdmissionPolicy '[^']*' with binding '[^']*': `)

// webhookName is where the API server names the webhook that denied a job:
// each install's copy of the configuration has its own.
var webhookName = regexp.MustCompile(`admission webhook "[^"]*"`)

// policyCase is one job: a Flyte-built job of testdata/flyte, or a variant.
type policyCase struct {
	name string
	job  func(s *spec) *framework.JobBuilder
	// leftToTheWebhook: the policy alone leaves it as sent, with the no-webhook warning.
	leftToTheWebhook bool
	// What the webhook alone does: the source it sets (none: unchanged),
	// how many warnings it gives, whether it denies the job.
	source   mutate.Source
	warnings int
	denied   bool
}

// releasePolicyCases are the kubeflow.org/v1 jobs that the older Flyte
// releases' backends build (testdata/flyte/releases), each of which the
// policy must store as the webhook does.
func releasePolicyCases() []policyCase {
	releases, err := fixtures.FlyteReleases()
	Expect(err).NotTo(HaveOccurred())
	var cases []policyCase
	for _, newest := range policyCases()[:len(fixtures.FlyteJobs)] {
		for _, release := range releases {
			if release == fixtures.NewestFlyteRelease {
				continue // policyCases has its jobs
			}
			expected, _ := fixtures.FlyteExpected(release, newest.name)
			cases = append(cases, policyCase{name: newest.name + " as Flyte " + release + " builds it",
				job: func(s *spec) *framework.JobBuilder {
					return s.env.ReleaseJob(s.namespace, release, newest.name)
				},
				leftToTheWebhook: expected.LeftToTheWebhook(), source: mutate.Source(expected.Webhook)})
		}
	}
	return cases
}

// policyCases are the jobs of testdata/flyte and the variants the policy must
// store as the webhook does.
func policyCases() []policyCase {
	var cases []policyCase
	for _, name := range fixtures.FlyteJobs {
		expected, ok := fixtures.FlyteExpected(fixtures.NewestFlyteRelease, name)
		Expect(ok).To(BeTrue(), "no expected source for %s", name)
		cases = append(cases, policyCase{name: name, job: func(s *spec) *framework.JobBuilder { return s.job(name) },
			leftToTheWebhook: expected.LeftToTheWebhook(), source: mutate.Source(expected.Webhook)})
	}
	declared := func(s *spec) *framework.JobBuilder { return s.job(fixtures.HorovodWorkerCommand) }
	undeclared := func(s *spec) *framework.JobBuilder { return s.job(fixtures.HorovodNoWorkerCommand) }
	sidecar := map[string]any{"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}
	manyArgs := make([]any, 300)
	for i := range manyArgs {
		manyArgs[i] = "-x"
	}
	return append(cases,
		policyCase{name: "a declared command, the command already set", job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("command", []any{"/bin/sh"})
		}},
		policyCase{name: "a declared command, command null", source: mutate.SourceFlyteWorkerArgs, job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("command", nil)
		}},
		policyCase{name: "a declared command, command []", source: mutate.SourceFlyteWorkerArgs, job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("command", []any{})
		}},
		policyCase{name: "no worker command, command []", job: func(s *spec) *framework.JobBuilder {
			return undeclared(s).WorkerField("command", []any{})
		}},
		policyCase{name: "no worker command, command set", job: func(s *spec) *framework.JobBuilder {
			return undeclared(s).WorkerField("command", []any{"/bin/sh"})
		}},
		policyCase{name: "args equal to the launcher's", job: func(s *spec) *framework.JobBuilder {
			b := declared(s)
			launcher, _, _ := unstructured.NestedSlice(b.Obj().Object, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers")
			launcher[0].(map[string]any)["args"] = framework.AnyList(fixtures.SSHD)
			return b.Set(launcher, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers")
		}},
		policyCase{name: "a declared command, no Launcher", warnings: 1, job: func(s *spec) *framework.JobBuilder {
			b := declared(s)
			obj := b.Obj()
			unstructured.RemoveNestedField(obj.Object, "spec", "mpiReplicaSpecs", "Launcher")
			return b.Set(obj.Object["spec"], "spec")
		}},
		policyCase{name: "no worker command, no Launcher", job: func(s *spec) *framework.JobBuilder {
			b := undeclared(s)
			obj := b.Obj()
			unstructured.RemoveNestedField(obj.Object, "spec", "mpiReplicaSpecs", "Launcher")
			return b.Set(obj.Object["spec"], "spec")
		}},
		policyCase{name: "a declared command, a launcher without containers", warnings: 1, job: func(s *spec) *framework.JobBuilder {
			return declared(s).Set([]any{}, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers")
		}},
		policyCase{name: "pyflyte-fast-execute in a path", job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("args", []any{"/opt/venv/bin/pyflyte-fast-execute", "--additional-distribution", "s3://b/f.tar.gz",
				"--dest-dir", ".", "--", "/usr/sbin/sshd", "-De"})
		}},
		policyCase{name: "an empty string in the args", source: mutate.SourceFlyteWorkerArgs, job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("args", []any{"/usr/sbin/sshd", "", "-De"})
		}},
		// Flyte's legacy split of " /usr/sbin/sshd -De": no program to start, left as Flyte made it.
		policyCase{name: "args whose first word is empty", warnings: 1, job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("args", []any{"", "/usr/sbin/sshd", "-De"})
		}},
		policyCase{name: "args of one empty string", warnings: 1, job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("args", []any{""})
		}},
		policyCase{name: "args []", job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("args", []any{})
		}},
		policyCase{name: "args null", job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("args", nil)
		}},
		policyCase{name: "annotations absent", source: mutate.SourceFlyteWorkerArgs, job: func(s *spec) *framework.JobBuilder {
			b := declared(s)
			obj := b.Obj()
			unstructured.RemoveNestedField(obj.Object, "metadata", "annotations")
			return b.Set(obj.Object["metadata"], "metadata")
		}},
		policyCase{name: "annotations null", source: mutate.SourceFlyteWorkerArgs, job: func(s *spec) *framework.JobBuilder {
			return declared(s).Set(nil, "metadata", "annotations")
		}},
		policyCase{name: "annotations {}, no worker command", job: func(s *spec) *framework.JobBuilder {
			return undeclared(s).Set(map[string]any{}, "metadata", "annotations")
		}},
		policyCase{name: "the MPI container not first", warnings: 1, job: func(s *spec) *framework.JobBuilder {
			return declared(s).FirstWorkerContainer(sidecar)
		}},
		policyCase{name: "the MPI container not first, no worker command", warnings: 1, job: func(s *spec) *framework.JobBuilder {
			return undeclared(s).FirstWorkerContainer(sidecar)
		}},
		policyCase{name: "a sidecar after the MPI container, no worker command", job: func(s *spec) *framework.JobBuilder {
			return undeclared(s).WorkerContainer(sidecar)
		}},
		policyCase{name: "no Worker", job: func(s *spec) *framework.JobBuilder {
			b := declared(s)
			obj := b.Obj()
			unstructured.RemoveNestedField(obj.Object, "spec", "mpiReplicaSpecs", "Worker")
			return b.Set(obj.Object["spec"], "spec")
		}},
		policyCase{name: "worker-spec-command on the Worker's pod template", source: mutate.SourceWorkerSpecCommand, leftToTheWebhook: true, job: func(s *spec) *framework.JobBuilder {
			return undeclared(s).WorkerAnnotation(mutate.AnnotationWorkerSpecCommand, fixtures.SSHDLine)
		}},
		policyCase{name: "task-custom on the job, beside a declared command", source: mutate.SourceTaskCustom, leftToTheWebhook: true, job: func(s *spec) *framework.JobBuilder {
			return declared(s).Annotation(mutate.AnnotationTaskCustom, `{"workerReplicas":{"command":["/usr/sbin/sshd","-D"]}}`)
		}},
		policyCase{name: "an invalid task-type-version alone", denied: true, leftToTheWebhook: true, job: func(s *spec) *framework.JobBuilder {
			return declared(s).Annotation(mutate.AnnotationTaskTypeVersion, "7")
		}},
		policyCase{name: "a declared command of 300 words, past what the policy reads", source: mutate.SourceFlyteWorkerArgs, leftToTheWebhook: true, job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("args", append(framework.AnyList(fixtures.SSHD), manyArgs...))
		}},
		policyCase{name: "a declared command with a 1 MiB word, past what the policy reads", source: mutate.SourceFlyteWorkerArgs, leftToTheWebhook: true, job: func(s *spec) *framework.JobBuilder {
			return declared(s).WorkerField("args", append(framework.AnyList(fixtures.SSHD), "-o", strings.Repeat("x", 1<<20)))
		}},
		// Without the bound, the API server refuses this one: "actual cost limit exceeded".
		policyCase{name: "a declared command with 10000 more words of 100 bytes, past the CEL cost limit", source: mutate.SourceFlyteWorkerArgs, leftToTheWebhook: true, job: func(s *spec) *framework.JobBuilder {
			words := make([]any, 10000)
			for i := range words {
				words[i] = strings.Repeat("y", 100)
			}
			return declared(s).WorkerField("args", append(framework.AnyList(fixtures.SSHD), words...))
		}},
	)
}

// PolicyLabel marks the specs that need the v1 MutatingAdmissionPolicy
// (Kubernetes 1.36 on): make test-versions leaves them out on older API
// servers with -ginkgo.label-filter='!policy'.
const PolicyLabel = "policy"

// describePolicy declares the specs of the admission policies: every job
// stored through the policy alone, and through the policy and the webhook
// together, is stored as the webhook alone stores it.
func describePolicy(s *spec) bool {
	return Describe("the admission policies, against the webhook", Ordered, Label(PolicyLabel), func() {
		clients := map[string]client.Client{}
		recorders := map[string]*framework.WarningRecorder{}

		BeforeAll(func(ctx SpecContext) {
			root, err := fixtures.RepoRoot()
			Expect(err).NotTo(HaveOccurred())
			render := func(dir string) *manifests.Manifests {
				m, err := manifests.Render(filepath.Join(root, "config", dir), "")
				Expect(err).NotTo(HaveOccurred())
				return m
			}
			configured, err := framework.ConfiguredOptions(render("default"))
			Expect(err).NotTo(HaveOccurred())

			Expect(s.env.ServeLabelled(ctx, webhookAloneLabel, configured)).To(Succeed())

			Expect(s.env.LeaveLabelled(ctx, policyAloneLabel)).To(Succeed())
			Expect(s.env.InstallPolicies(ctx, render("policy-only"), policyAloneLabel)).To(Succeed())

			both := render("default-with-policy")
			Expect(s.env.LeaveLabelled(ctx, bothLabel)).To(Succeed())
			Expect(s.env.InstallPolicies(ctx, both, bothLabel)).To(Succeed())
			hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
			Expect(both.Decode("MutatingWebhookConfiguration", hook)).To(Succeed())
			Expect(hook.Webhooks[0].MatchConditions).NotTo(BeEmpty())
			Expect(s.env.ServeLabelledAs(ctx, bothLabel, hook, configured)).To(Succeed())

			Expect(s.env.LeaveLabelled(ctx, noAdmissionLabel)).To(Succeed())

			for _, arm := range arms {
				clients[arm], recorders[arm], err = s.env.WarningClient()
				Expect(err).NotTo(HaveOccurred())
			}
		}, NodeTimeout(framework.StartTimeout))

		// admit creates job through the install of arm.
		admit := func(ctx context.Context, arm string, job *unstructured.Unstructured) admitted {
			GinkgoHelper()
			job = job.DeepCopy()
			labels := job.GetLabels()
			labels[arm] = "true"
			job.SetLabels(labels)
			before := len(recorders[arm].Messages())
			var out admitted
			if err := clients[arm].Create(ctx, job); err != nil {
				out.Err = webhookName.ReplaceAllString(err.Error(), `admission webhook "..."`)
			} else {
				out.Stored = framework.WithoutServerSetMetadata(s.get(ctx, job), arm)
			}
			for _, w := range recorders[arm].Messages()[before:] {
				out.Warnings = append(out.Warnings, policyWarning.ReplaceAllString(w, ""))
			}
			slices.Sort(out.Warnings)
			return out
		}

		It("accepts each install's policies as bin/kustomize renders them", func(ctx SpecContext) {
			root, err := fixtures.RepoRoot()
			Expect(err).NotTo(HaveOccurred())
			var accepted []string
			for _, dir := range []string{"policy", "policy-only", "default-with-policy"} {
				m, err := manifests.Render(filepath.Join(root, "config", dir), "")
				Expect(err).NotTo(HaveOccurred())
				for _, obj := range m.Objects {
					if !strings.HasSuffix(obj.GroupVersionKind().Group, "admissionregistration.k8s.io") ||
						obj.GetKind() == "MutatingWebhookConfiguration" { // the webhook's: see describeInstall
						continue
					}
					obj = obj.DeepCopy()
					obj.SetName(obj.GetName() + "-dry-run") // installed under its own name already
					Expect(s.env.Client.Create(ctx, obj, client.DryRunAll)).To(Succeed(), "config/%s: %s %s", dir, obj.GetKind(), obj.GetName())
					accepted = append(accepted, dir+": "+obj.GetKind())
				}
			}
			Expect(accepted).To(ContainElements("policy: MutatingAdmissionPolicy", "policy: MutatingAdmissionPolicyBinding",
				"policy: ValidatingAdmissionPolicy", "policy: ValidatingAdmissionPolicyBinding"))
			Expect(accepted).To(HaveLen(4 + 6 + 4))
		})

		cases := policyCases()
		if s.version == "v1" { // Flyte creates kubeflow.org/v1 MPIJobs only
			cases = append(cases, releasePolicyCases()...)
		}
		for _, tc := range cases {
			It("stores "+tc.name+" through the policy as the webhook does", func(ctx SpecContext) {
				sent := tc.job(s).Obj()
				webhook := admit(ctx, webhookAloneLabel, sent)
				policy := admit(ctx, policyAloneLabel, sent)
				both := admit(ctx, bothLabel, sent)

				// What the webhook alone does, so that no comparison below holds for want of a change.
				if tc.denied {
					Expect(webhook.Err).To(ContainSubstring("denied the request"))
				} else {
					Expect(webhook.Err).To(BeEmpty())
					source, mutated := webhook.Stored.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
					want := tc.source
					if want == "" {
						want = mutate.SourceNone // a case that names none
					}
					if !mutated {
						source = string(mutate.SourceNone) // stored without the annotation
					}
					Expect(mutate.Source(source)).To(Equal(want), "the webhook's source (mutated: %t)", mutated)
				}
				Expect(webhook.Warnings).To(HaveLen(tc.warnings), "the webhook's warnings")

				// "both" is the webhook alone, warnings included.
				Expect(cmp.Diff(webhook, both)).To(BeEmpty(), "the webhook alone (-) and both (+)")

				if tc.leftToTheWebhook {
					// The policy alone leaves the job as sent, and says why.
					unchanged := admit(ctx, noAdmissionLabel, sent)
					Expect(cmp.Diff(unchanged.Stored, policy.Stored)).To(BeEmpty(), "with no admission (-) and the policy alone (+)")
					Expect(policy.Stored.GetAnnotations()).NotTo(HaveKey(mutate.AnnotationWorkerCommandSource))
					Expect(policy.Warnings).To(HaveLen(1))
					Expect(policy.Warnings).To(ContainElement(Or(
						ContainSubstring("no webhook is installed to read it"), ContainSubstring("past what the policy reads"))))
				} else {
					Expect(cmp.Diff(webhook, policy)).To(BeEmpty(), "the webhook alone (-) and the policy alone (+)")
				}

				// A second pass, of what each stored, changes nothing.
				for arm, first := range map[string]admitted{webhookAloneLabel: webhook, policyAloneLabel: policy, bothLabel: both} {
					if first.Stored == nil {
						continue
					}
					again := admit(ctx, arm, framework.Recreatable(first.Stored))
					Expect(again.Err).To(BeEmpty(), "the second pass through %s", arm)
					Expect(cmp.Diff(first.Stored, again.Stored)).To(BeEmpty(), "the second pass through %s: first (-) and second (+)", arm)
				}
			})
		}

		describeUpstream(s, admit)
	})
}
