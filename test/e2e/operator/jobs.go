package operator

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Replica is one of an MPIJob's replica specs (Launcher, Worker), as far as
// the suites read it: the same in kubeflow.org/v1 and v2beta1.
type Replica struct {
	Replicas *int32                 `json:"replicas,omitempty"`
	Template corev1.PodTemplateSpec `json:"template"`
}

// ReplicaSpec returns the replica spec named replica (Launcher, Worker) of
// job, an MPIJob of either version.
func ReplicaSpec(job *unstructured.Unstructured, replica string) Replica {
	GinkgoHelper()
	spec, found, err := unstructured.NestedMap(job.Object, "spec", "mpiReplicaSpecs", replica)
	Expect(err).NotTo(HaveOccurred())
	Expect(found).To(BeTrue(), "spec.mpiReplicaSpecs.%s is missing", replica)
	var r Replica
	Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &r)).To(Succeed())
	return r
}

// WorkerCount returns the number of workers job asks for.
func WorkerCount(job *unstructured.Unstructured) int {
	GinkgoHelper()
	r := ReplicaSpec(job, "Worker")
	Expect(r.Replicas).NotTo(BeNil(), "spec.mpiReplicaSpecs.Worker.replicas is not set")
	return int(*r.Replicas)
}

// Containers returns the containers of replica (Launcher, Worker) of job.
func Containers(job *unstructured.Unstructured, replica string) []corev1.Container {
	GinkgoHelper()
	return ReplicaSpec(job, replica).Template.Spec.Containers
}

// Args returns the args of the first container of replica (Launcher, Worker) of job.
func Args(job *unstructured.Unstructured, replica string) []string {
	GinkgoHelper()
	containers := Containers(job, replica)
	Expect(containers).NotTo(BeEmpty(), "spec.mpiReplicaSpecs.%s has no containers", replica)
	return containers[0].Args
}

// Runs matches a Pod whose container named mpi, as Flyte names it, runs
// command with args; nil matches none.
func Runs(command, args []string) OmegaMatcher {
	return HaveField("Spec.Containers", ContainElement(And(
		HaveField("Name", "mpi"), HaveField("Command", words(command)), HaveField("Args", words(args)))))
}

// words matches a container's command or args: nil matches absent or empty.
func words(words []string) OmegaMatcher {
	if words == nil {
		return BeEmpty()
	}
	return Equal(words)
}

// Container is what an operator may change in a container: what it runs,
// its environment and its mounts. Project projects containers onto it, so
// that a spec can say exactly what an operator made of each container of a job.
type Container struct {
	Name         string
	Command      []string
	Args         []string
	Env          []corev1.EnvVar
	VolumeMounts []corev1.VolumeMount
}

// Project projects containers onto what they run, their environment and mounts.
func Project(containers []corev1.Container) []Container {
	out := make([]Container, len(containers))
	for i, c := range containers {
		out[i] = Container{Name: c.Name, Command: c.Command, Args: c.Args, Env: c.Env, VolumeMounts: c.VolumeMounts}
	}
	return out
}

// WithFirstContainer puts container before the others in both of job's
// replicas, as a pod template that lists a sidecar before the task's
// container does, and returns job.
func WithFirstContainer(job *unstructured.Unstructured, container corev1.Container) *unstructured.Unstructured {
	GinkgoHelper()
	first, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&container)
	Expect(err).NotTo(HaveOccurred())
	for _, replica := range []string{"Launcher", "Worker"} {
		path := []string{"spec", "mpiReplicaSpecs", replica, "template", "spec", "containers"}
		containers, _, err := unstructured.NestedSlice(job.Object, path...)
		Expect(err).NotTo(HaveOccurred())
		Expect(unstructured.SetNestedSlice(job.Object, append([]any{first}, containers...), path...)).To(Succeed())
	}
	return job
}
