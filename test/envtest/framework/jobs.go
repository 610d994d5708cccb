package framework

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// FlytekitCustom is the task custom flytekit writes for a Horovod task.
const FlytekitCustom = `{"workerReplicas":{"replicas":2,"resources":{},"command":["/usr/sbin/sshd","-De","-f","/home/jobuser/.sshd_config"]},"launcherReplicas":{"replicas":1,"resources":{}},"runPolicy":{},"slots":1}`

// SSHD is flytekit's Horovod worker command.
var SSHD = []string{"/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"}

// WorkerContainersPath is where both MPIJob versions keep the worker's containers.
var WorkerContainersPath = []string{"spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers"}

// JobBuilder builds an MPIJob shaped exactly as Flyte's MPI plugin creates it
// (testdata/mpijob-VERSION.yaml), as unstructured, so that fields our Go
// types lack go to the API server as they are.
type JobBuilder struct{ obj *unstructured.Unstructured }

// FlyteJob starts from the sample Flyte MPIJob of the Env's version, in namespace.
func (e *Env) FlyteJob(namespace string) *JobBuilder {
	root, err := repoRoot()
	if err != nil {
		panic(err)
	}
	obj, err := ReadJob(filepath.Join(root, "testdata", "mpijob-"+e.Version+".yaml"))
	if err != nil {
		panic(err)
	}
	obj.SetNamespace(namespace)
	obj.SetName("")
	obj.SetGenerateName("f3a1b2c4d5e6-n0-")
	return &JobBuilder{obj: obj}
}

// ReadJob reads an MPIJob from a YAML or JSON file.
func ReadJob(path string) (*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var content map[string]any
	if err := yaml.Unmarshal(b, &content); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &unstructured.Unstructured{Object: content}, nil
}

// Annotation sets an annotation on the MPIJob.
func (b *JobBuilder) Annotation(key, value string) *JobBuilder {
	a := b.obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	b.obj.SetAnnotations(a)
	return b
}

// WorkerAnnotation sets an annotation on the Worker's pod template.
func (b *JobBuilder) WorkerAnnotation(key, value string) *JobBuilder {
	return b.Set(value, "spec", "mpiReplicaSpecs", "Worker", "template", "metadata", "annotations", key)
}

// Label sets a label on the MPIJob.
func (b *JobBuilder) Label(key, value string) *JobBuilder {
	l := b.obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[key] = value
	b.obj.SetLabels(l)
	return b
}

// WithoutLabels removes every label from the MPIJob: it is no Flyte task then.
func (b *JobBuilder) WithoutLabels() *JobBuilder { b.obj.SetLabels(nil); return b }

// WorkerContainer appends a container to the Worker's pod template.
func (b *JobBuilder) WorkerContainer(container map[string]any) *JobBuilder {
	containers, _, _ := unstructured.NestedSlice(b.obj.Object, WorkerContainersPath...)
	return b.Set(append(containers, container), WorkerContainersPath...)
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
