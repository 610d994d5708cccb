package mutate

// jobBuilder builds the Job view of a Flyte MPIJob for tests, in the shape
// Flyte's MPI plugin creates: labelled, with one worker container "mpi" that
// carries the launcher's task args.
type jobBuilder struct{ job Job }

var taskArgs = []string{"horovodrun", "-np", "2", "pyflyte-execute", "--inputs", "s3://bucket/inputs.pb"}

func flyteJob() *jobBuilder {
	return &jobBuilder{job: Job{
		Metadata: Metadata{
			Name:      "f3a1b2c4d5e6-n0-0",
			Namespace: "flytesnacks-development",
			Labels:    map[string]string{"execution-id": "f3a1b2c4d5e6", "task-name": "horovod-training-task", "node-id": "n0"},
		},
		Spec: JobSpec{MPIReplicaSpecs: ReplicaSpecs{Worker: &ReplicaSpec{Template: PodTemplate{
			Spec: PodSpec{Containers: []Container{{Name: "mpi", Args: words(taskArgs...)}}},
		}}}},
	}}
}

func words(w ...string) Words { return Words{Present: true, Values: w} }

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

func (b *jobBuilder) containers(c ...Container) *jobBuilder {
	b.job.Spec.MPIReplicaSpecs.Worker.Template.Spec.Containers = c
	return b
}

func (b *jobBuilder) noWorker() *jobBuilder { b.job.Spec.MPIReplicaSpecs.Worker = nil; return b }

func (b *jobBuilder) obj() *Job { return &b.job }
