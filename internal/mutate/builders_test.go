package mutate

// jobBuilder builds the Job view of a Flyte MPIJob for tests, in the shape
// Flyte's MPI plugin creates for a task that declares no worker command: a
// labelled job whose Launcher and Worker each have one container "mpi" that
// carries the task's args.
type jobBuilder struct{ job Job }

var taskArgs = []string{"horovodrun", "-np", "2", "pyflyte-execute", "--inputs", "s3://bucket/inputs.pb"}

func flyteJob() *jobBuilder {
	replica := func() *ReplicaSpec {
		return &ReplicaSpec{Template: PodTemplate{Spec: PodSpec{Containers: []Container{{Name: "mpi", Args: list(taskArgs...)}}}}}
	}
	return &jobBuilder{job: Job{
		Metadata: Metadata{
			Name:      "f3a1b2c4d5e6-n0-0",
			Namespace: "flytesnacks-development",
			Labels:    map[string]string{"execution-id": "f3a1b2c4d5e6", "task-name": "horovod-training-task", "node-id": "n0"},
		},
		Spec: JobSpec{MPIReplicaSpecs: ReplicaSpecs{Launcher: replica(), Worker: replica()}},
	}}
}

// list returns a present command or args field holding w.
func list(w ...string) *[]string { return &w }

func (b *jobBuilder) labels(l map[string]string) *jobBuilder { b.job.Metadata.Labels = l; return b }

func (b *jobBuilder) annotation(key, value string) *jobBuilder {
	if b.job.Metadata.Annotations == nil {
		b.job.Metadata.Annotations = map[string]string{}
	}
	b.job.Metadata.Annotations[key] = value
	return b
}

func (b *jobBuilder) workerAnnotation(key, value string) *jobBuilder {
	m := &b.job.Spec.MPIReplicaSpecs.Worker.Template.Metadata
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[key] = value
	return b
}

// containers sets the Worker's containers.
func (b *jobBuilder) containers(c ...Container) *jobBuilder {
	b.job.Spec.MPIReplicaSpecs.Worker.Template.Spec.Containers = c
	return b
}

// workerArgs sets the args of the Worker's first container, as Flyte writes a
// declared worker command.
func (b *jobBuilder) workerArgs(args ...string) *jobBuilder {
	b.job.Spec.MPIReplicaSpecs.Worker.Template.Spec.Containers[0].Args = list(args...)
	return b
}

// launcherContainers sets the Launcher's containers.
func (b *jobBuilder) launcherContainers(c ...Container) *jobBuilder {
	b.job.Spec.MPIReplicaSpecs.Launcher.Template.Spec.Containers = c
	return b
}

func (b *jobBuilder) noWorker() *jobBuilder { b.job.Spec.MPIReplicaSpecs.Worker = nil; return b }

func (b *jobBuilder) noLauncher() *jobBuilder { b.job.Spec.MPIReplicaSpecs.Launcher = nil; return b }

func (b *jobBuilder) obj() *Job { return &b.job }
