package framework

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// WorkerContainersPath is where both MPIJob versions keep the worker's containers.
var WorkerContainersPath = []string{"spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers"}

// JobBuilder edits an MPIJob read from testdata, as unstructured, so that
// fields the webhook's Go types lack go to the API server as they are.
type JobBuilder struct{ obj *unstructured.Unstructured }

// Job starts from testdata/flyte/VERSION/NAME.yaml (fixtures.FlyteJob), an
// MPIJob of the Env's version as Flyte's backend builds it, in namespace. Its
// name becomes a generateName, so that a spec may create it more than once.
func (e *Env) Job(namespace, name string) *JobBuilder {
	obj, err := fixtures.FlyteJob(e.Version, name)
	if err != nil {
		panic(err)
	}
	return newJobBuilder(obj, namespace)
}

// ReleaseJob starts from the kubeflow.org/v1 MPIJob that the backend of the
// Flyte release builds for the task name (fixtures.FlyteReleaseJob), in
// namespace, like Job.
func (e *Env) ReleaseJob(namespace, release, name string) *JobBuilder {
	obj, err := fixtures.FlyteReleaseJob(release, name)
	if err != nil {
		panic(err)
	}
	return newJobBuilder(obj, namespace)
}

// PublishedJob starts from the MPIJob of the Env's version that Flyte
// fixtures.NewestFlyteRelease as published builds for the job name of
// fixtures.UpstreamJobs (fixtures.PublishedFlyteJob), in namespace, like Job.
func (e *Env) PublishedJob(namespace, name string) *JobBuilder {
	obj, err := fixtures.PublishedFlyteJob(e.Version, name)
	if err != nil {
		panic(err)
	}
	return newJobBuilder(obj, namespace)
}

// PatchedJob starts from the MPIJob of the Env's version that the same Flyte
// builds with the upstream fix for the job name (fixtures.PatchedFlyteJob),
// in namespace, like Job.
func (e *Env) PatchedJob(namespace, name string) *JobBuilder {
	obj, err := fixtures.PatchedFlyteJob(e.Version, name)
	if err != nil {
		panic(err)
	}
	return newJobBuilder(obj, namespace)
}

func newJobBuilder(obj *unstructured.Unstructured, namespace string) *JobBuilder {
	obj.SetNamespace(namespace)
	obj.SetGenerateName(obj.GetName() + "-")
	obj.SetName("")
	return &JobBuilder{obj: obj}
}

// Annotation sets an annotation on the MPIJob.
func (b *JobBuilder) Annotation(key, value string) *JobBuilder {
	return b.Set(value, "metadata", "annotations", key)
}

// WorkerAnnotation sets an annotation on the Worker's pod template.
func (b *JobBuilder) WorkerAnnotation(key, value string) *JobBuilder {
	return b.Set(value, "spec", "mpiReplicaSpecs", "Worker", "template", "metadata", "annotations", key)
}

// Label sets a label on the MPIJob.
func (b *JobBuilder) Label(key, value string) *JobBuilder {
	return b.Set(value, "metadata", "labels", key)
}

// WithoutLabels removes every label from the MPIJob: it is no Flyte task then.
func (b *JobBuilder) WithoutLabels() *JobBuilder { b.obj.SetLabels(nil); return b }

// WorkerContainer appends a container to the Worker's pod template.
func (b *JobBuilder) WorkerContainer(container map[string]any) *JobBuilder {
	containers, _, _ := unstructured.NestedSlice(b.obj.Object, WorkerContainersPath...)
	return b.Set(append(containers, container), WorkerContainersPath...)
}

// FirstWorkerContainer puts a container before the Worker's others.
func (b *JobBuilder) FirstWorkerContainer(container map[string]any) *JobBuilder {
	containers, _, _ := unstructured.NestedSlice(b.obj.Object, WorkerContainersPath...)
	return b.Set(append([]any{container}, containers...), WorkerContainersPath...)
}

// WorkerField sets a field of the Worker's first container (nil for JSON
// null), such as its args, where Flyte writes the worker command a task declares.
func (b *JobBuilder) WorkerField(field string, value any) *JobBuilder {
	containers := WorkerContainers(b.obj)
	containers[0].(map[string]any)[field] = value
	return b.Set(containers, WorkerContainersPath...)
}

// Set sets any field, for fields no other method covers.
func (b *JobBuilder) Set(value any, fields ...string) *JobBuilder {
	if err := unstructured.SetNestedField(b.obj.Object, value, fields...); err != nil {
		panic(err)
	}
	return b
}

// Obj returns the MPIJob.
func (b *JobBuilder) Obj() *unstructured.Unstructured { return b.obj.DeepCopy() }

// WorkerContainers returns the Worker's containers of an MPIJob.
func WorkerContainers(obj *unstructured.Unstructured) []any {
	containers, _, _ := unstructured.NestedSlice(obj.Object, WorkerContainersPath...)
	return containers
}

// Launcher returns the Launcher replica spec of an MPIJob.
func Launcher(obj *unstructured.Unstructured) map[string]any {
	launcher, _, _ := unstructured.NestedMap(obj.Object, "spec", "mpiReplicaSpecs", "Launcher")
	return launcher
}

// ReplicaArgs returns the args of the first container of one of job's replicas.
func ReplicaArgs(job *unstructured.Unstructured, replica string) ([]string, error) {
	containers, _, err := unstructured.NestedSlice(job.Object, "spec", "mpiReplicaSpecs", replica, "template", "spec", "containers")
	if err != nil {
		return nil, err
	}
	if len(containers) == 0 {
		return nil, fmt.Errorf("replica %s has no containers", replica)
	}
	args, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return args, err
}

// WorkerReplicas returns the number of workers job asks for.
func WorkerReplicas(job *unstructured.Unstructured) (int, error) {
	replicas, found, err := unstructured.NestedInt64(job.Object, "spec", "mpiReplicaSpecs", "Worker", "replicas")
	if err == nil && !found {
		err = fmt.Errorf("spec.mpiReplicaSpecs.Worker.replicas is not set")
	}
	return int(replicas), err
}

// AnyList turns words into the []any an unstructured object holds.
func AnyList(words []string) []any {
	out := make([]any, len(words))
	for i, w := range words {
		out[i] = w
	}
	return out
}
