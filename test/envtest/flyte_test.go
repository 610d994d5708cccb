package envtest_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// describeFlyteJobs declares the specs of the jobs Flyte's backend builds
// (testdata/flyte), as Flyte creates them: no mpi.flyte.org annotation but
// those a user adds through Flyte (pod template, task or launch plan), so
// that a task that declared its worker command runs it without any.
func describeFlyteJobs(s *spec) bool {
	return Describe("the jobs Flyte builds", func() {
		DescribeTable("as Flyte creates them",
			func(ctx SpecContext, name string) {
				expected, ok := fixtures.FlyteExpected(fixtures.NewestFlyteRelease, name)
				Expect(ok).To(BeTrue(), "no expected source for %s", name)
				source := mutate.Source(expected.Webhook)
				job := s.job(name).Obj()
				stored := s.create(ctx, job)
				if source == mutate.SourceNone {
					expectUnchanged(stored, job)
				} else {
					expectWorker(stored, fixtures.SSHD, source)
				}
				Expect(framework.Launcher(stored)).To(Equal(framework.Launcher(job)))
			},
			Entry("a Horovod task with Worker(command=sshd) and no annotation runs sshd: its args become the command",
				fixtures.HorovodWorkerCommand),
			Entry("the same task, fast-registered (pyflyte-fast-execute), runs sshd",
				fixtures.HorovodFastRegisterWorkerCommand),
			Entry("a task that declares Launcher(command=...) and Worker(command=sshd) runs sshd",
				fixtures.HorovodBothCommands),
			Entry("a v0 task's worker_spec_command, which Flyte splits into the Worker's args, runs sshd",
				fixtures.LegacyWorkerSpecCommand),
			Entry("a task without a worker command is left alone: the Worker's args are the Launcher's",
				fixtures.HorovodNoWorkerCommand),
			Entry("a task that declares Launcher(command=...) only is left alone: the Worker runs the task",
				fixtures.HorovodLauncherCommand),
			Entry("a plain MPI task is left alone",
				fixtures.MPIPlain),
			Entry("the annotation in @task(pod_template=...) gives the command",
				fixtures.HorovodPodTemplateAnnotation),
			Entry("the annotation in @task(annotations=...) gives the command",
				fixtures.HorovodTaskAnnotations),
			Entry("the annotation of the launch plan gives the command",
				fixtures.HorovodLaunchPlanAnnotations),
		)

		It("patches the first container, which the operators run as the MPI container, and warns that mpi is not first", func(ctx SpecContext) {
			c, warnings, err := s.env.WarningClient()
			Expect(err).NotTo(HaveOccurred())
			sidecar := map[string]any{"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}
			job := s.job(fixtures.HorovodPodTemplateAnnotation).FirstWorkerContainer(sidecar).Obj()
			Expect(c.Create(ctx, job)).To(Succeed())
			stored := s.get(ctx, job)
			containers := framework.WorkerContainers(stored)
			Expect(containers).To(HaveLen(2))
			Expect(containers[0]).To(And(HaveKeyWithValue("name", "log-shipper"),
				HaveKeyWithValue("command", framework.AnyList(fixtures.SSHD)), Not(HaveKey("args"))))
			Expect(containers[1]).To(Equal(framework.WorkerContainers(job)[1]))
			Expect(warnings.Messages()).To(ContainElement(ContainSubstring(
				`spec.mpiReplicaSpecs.Worker.template.spec.containers[1]: is named "mpi"`)))
		})

		It("takes no args for a declared command without a Launcher, and says why", func(ctx SpecContext) {
			c, warnings, err := s.env.WarningClient()
			Expect(err).NotTo(HaveOccurred())
			job := s.job(fixtures.HorovodWorkerCommand).Obj()
			unstructured.RemoveNestedField(job.Object, "spec", "mpiReplicaSpecs", "Launcher")
			Expect(c.Create(ctx, job)).To(Succeed())
			expectUnchanged(s.get(ctx, job), job)
			Expect(warnings.Messages()).To(ContainElement(ContainSubstring("spec.mpiReplicaSpecs.Launcher: missing")))
		})

		It("leaves a worker that has a command alone", func(ctx SpecContext) {
			job := s.job(fixtures.HorovodWorkerCommand).Obj()
			containers := framework.WorkerContainers(job)
			containers[0].(map[string]any)["command"] = []any{fixtures.SSHD[0]}
			Expect(unstructured.SetNestedSlice(job.Object, containers, framework.WorkerContainersPath...)).To(Succeed())
			expectUnchanged(s.create(ctx, job), job)
		})

		It("prefers the task-custom annotation to the Worker's args", func(ctx SpecContext) {
			stored := s.create(ctx, s.job(fixtures.HorovodWorkerCommand).
				Annotation(mutate.AnnotationTaskCustom, `{"workerReplicas":{"command":["/usr/sbin/sshd","-D"]}}`).Obj())
			Expect(framework.WorkerContainers(stored)).To(HaveExactElements(And(
				HaveKeyWithValue("command", []any{"/usr/sbin/sshd", "-D"}), Not(HaveKey("args")))))
			Expect(stored.GetAnnotations()).To(HaveKeyWithValue(mutate.AnnotationWorkerCommandSource, string(mutate.SourceTaskCustom)))
		})

		It("with --inject-as=args, stores the job with a declared Worker command as Flyte made it", func(ctx SpecContext) {
			const label = "test.mpi.flyte.org/inject-as-args"
			opts := mutate.DefaultOptions()
			opts.InjectAs = mutate.InjectArgs
			Expect(s.env.ServeLabelled(ctx, label, opts)).To(Succeed())
			job := s.job(fixtures.HorovodWorkerCommand).Label(label, "true").Obj()
			expectUnchanged(s.create(ctx, job), job)
		})

		It("with --infer-worker-command=false, stores the job with a declared Worker command as Flyte made it", func(ctx SpecContext) {
			const label = "test.mpi.flyte.org/no-inference"
			opts := mutate.DefaultOptions()
			opts.InferWorkerCommand = false
			Expect(s.env.ServeLabelled(ctx, label, opts)).To(Succeed())
			job := s.job(fixtures.HorovodWorkerCommand).Label(label, "true").Obj()
			expectUnchanged(s.create(ctx, job), job)
		})

		It("never lets --fallback-worker-command override a declared Worker command", func(ctx SpecContext) {
			const label = "test.mpi.flyte.org/fallback"
			opts := mutate.DefaultOptions()
			opts.FallbackCommand = []string{"/usr/sbin/sshd", "-D"}
			Expect(s.env.ServeLabelled(ctx, label, opts)).To(Succeed())

			declared := s.create(ctx, s.job(fixtures.HorovodWorkerCommand).Label(label, "true").Obj())
			expectWorker(declared, fixtures.SSHD, mutate.SourceFlyteWorkerArgs)

			undeclared := s.create(ctx, s.job(fixtures.HorovodNoWorkerCommand).Label(label, "true").Obj())
			Expect(framework.WorkerContainers(undeclared)).To(HaveExactElements(And(
				HaveKeyWithValue("command", []any{"/usr/sbin/sshd", "-D"}), Not(HaveKey("args")))))
			Expect(undeclared.GetAnnotations()).To(HaveKeyWithValue(mutate.AnnotationWorkerCommandSource, string(mutate.SourceFallback)))
		})
	})
}
